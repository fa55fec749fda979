"""What does GPUMonitor's exact example count cost the fit it measures?

Under TensorFlow the monitor adds one sequential stage to the end of the input pipeline Keras
feeds the training step: it reads each batch's leading dimension (``tf.shape``) and updates a
small counter variable on the host CPU (``tfthroughput.monitor.graph_count``). Two
measurements, each alternating which side goes first, medians of several repeats:

1. The stage alone: reading a pipeline of small batches to its end, with and without the
   counting stage: the cost per batch in microseconds, and the ratio of the times.
2. End to end: the same ``fit`` (an MLP, batch 64) with ``GPUMonitor()`` (counted) and with
   ``GPUMonitor(batch_size=64)`` (given: nothing counted), default sources (the host alone
   where there is no GPU); the median of the per-pair ratios of wall time. On a shared 2-core
   machine single fits vary by several percent, so this ratio carries that noise; its spread
   is printed.

Target: the stage costs a few tens of microseconds per batch, under 1 % of a fit's time.

    python benchmarks/example_count.py [--repeats 7] [--batches 4000] [--examples 48000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfthroughput import GPUMonitor  # noqa: E402
from tfthroughput.hardware import default_sources  # noqa: E402
from tfthroughput.monitor.example_count import RECENT  # noqa: E402
from tfthroughput.monitor.graph_count import GraphCount  # noqa: E402

BATCH = 64


def _read(dataset: tf.data.Dataset) -> float:
    start = time.perf_counter()
    for _ in dataset:
        pass
    return time.perf_counter() - start


def stage_cost(batches: int, repeats: int) -> tuple[float, float]:
    """Median (seconds per batch added, ratio counted / plain) of reading ``batches`` batches."""
    plain = (
        tf.data.Dataset.range(batches * BATCH).batch(BATCH).map(lambda i: tf.cast(i, tf.float32))
    )
    pairs = []
    for repeat in range(repeats):
        counted = GraphCount(RECENT).counting(plain)
        if repeat % 2:
            with_count, without = _read(counted), _read(plain)
        else:
            without, with_count = _read(plain), _read(counted)
        pairs.append((with_count - without, with_count / without))
    return (
        statistics.median(delta for delta, _ in pairs) / batches,
        statistics.median(ratio for _, ratio in pairs),
    )


def _fit(x, y, log_dir: str, batch_size: int | None) -> float:
    model = keras.Sequential(
        [keras.Input((x.shape[1],)), keras.layers.Dense(256, "relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    monitor = GPUMonitor(log_dir, batch_size=batch_size, sources=default_sources)
    start = time.perf_counter()
    model.fit(x, y, batch_size=BATCH, epochs=2, callbacks=[monitor], verbose=0)
    return time.perf_counter() - start


def fit_ratio(examples: int, repeats: int) -> list[float]:
    """Per-pair ratios of wall time: counted / given batch size."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, 64)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    ratios = []
    with tempfile.TemporaryDirectory() as log_dir:
        _fit(x, y, log_dir, None)  # warm-up: tracing, thread pools
        for repeat in range(repeats):
            if repeat % 2:
                counted, given = _fit(x, y, log_dir, None), _fit(x, y, log_dir, BATCH)
            else:
                given, counted = _fit(x, y, log_dir, BATCH), _fit(x, y, log_dir, None)
            ratios.append(counted / given)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batches", type=int, default=4000)
    parser.add_argument("--examples", type=int, default=48000)
    args = parser.parse_args()
    per_batch, stage = stage_cost(args.batches, args.repeats)
    print(f"counting stage: +{per_batch * 1e6:.1f} us per batch, {stage:.3f}x the plain read")
    ratios = fit_ratio(args.examples, args.repeats)
    spread = f"[{min(ratios):.3f}-{max(ratios):.3f}]"
    steps = 2 * -(-args.examples // BATCH)
    print(f"fit, counted / batch_size given: {statistics.median(ratios):.3f}x {spread}")
    print(
        f"summary: counting costs {per_batch * 1e6:.1f} us/batch ({steps} steps per fit); "
        f"fit wall time {statistics.median(ratios):.3f}x {spread} counted vs given batch_size"
    )


if __name__ == "__main__":
    main()
