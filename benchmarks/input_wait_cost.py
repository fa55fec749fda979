"""What counting and timing the wait for each batch (``input/wait_percent``) adds to each
batch a step takes, and what ``GPUMonitor`` with it costs a launch-bound ``fit``.

1. One batch at a time: Keras's TensorFlow backend takes each batch inside the compiled step
   (``iterator.get_next()``), one call per step with ``steps_per_execution=1``. This times that
   loop, a ``tf.function`` that takes one batch of a fast in-memory pipeline
   (``from_tensor_slices``, ``batch``, ``prefetch``), called once per batch from Python, over
   the bare pipeline and over the same pipeline through ``GraphCount.counting``: counting and
   timing (as without a strategy: the wait timed by tf.data's latency statistics, then the
   count on the step's thread), the count alone (as under a strategy), and the earlier stage that
   timed the wait with a clock zipped in front of the pipeline and the count, both on the
   step's thread (kept in this script to compare the two in one run).
2. Whole fits, the worst case for a per-batch cost: a two-layer MLP on batches of 16 (1,024
   steps an epoch) with ``steps_per_execution`` 1 and 128, bare against ``GPUMonitor``; epochs
   2 on timed from one epoch's start to the next by a callback listed first, as a user's own
   timing callback would see them. The input is a ``tf.data`` pipeline
   (``from_tensor_slices``, ``batch``, ``prefetch``), or with ``--input arrays`` the arrays
   themselves (``fit(x, y, batch_size=16)``): the monitor knows both inputs' batch sizes
   before the fit and counts them with no stage per batch. Beside it: ``GPUMonitor`` weighing
   each batch in the count's stage, as it must for an input whose sizes it cannot know (a
   ``map`` after the batching, a ``PyDataset``, a generator); ``GPUMonitor(input_wait=False)``
   (the count alone, free to run ahead of the step); and ``GPUMonitor`` without the count (no
   count, no wait share), to tell the count's and the timing's cost from the rest of the
   monitor's.

Sides are rotated round by round; each comparison prints the median of its per-round ratios
with the sign-test interval (``tfthroughput.tuning.engine.paired``) and the median added
microseconds per batch or per step; the load average is printed (the development machines
are shared).

    python benchmarks/input_wait_cost.py [--rounds 8] [--batches 2000] [--fit-rounds 6]
        [--epochs 5] [--part {take,fit,both}] [--input {dataset,arrays}]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _epoch_starts import EpochStarts  # noqa: E402

from tfthroughput import GPUMonitor  # noqa: E402
from tfthroughput._ratio_text import paired_words, ratio_text  # noqa: E402
from tfthroughput.monitor import graph_count  # noqa: E402
from tfthroughput.monitor.graph_count import GraphCount  # noqa: E402
from tfthroughput.tuning.engine.paired import paired_ratio  # noqa: E402

STEPS_PER_EPOCH = 1024
BATCH = 16


def earlier_stage(self: GraphCount, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The stage as it timed the wait before tf.data's latency statistics did: a one-op clock
    dataset zipped in front of the pipeline and the count, both run inline on the step's
    thread, the wait summed in the counter (kept here to compare the two in one run)."""
    state = tf.Variable(tf.zeros([3 + 256], tf.int64))
    self._earlier_state = state  # lives as long as the count

    def nanoseconds():
        return tf.cast(tf.timestamp() * 1e9, tf.int64)

    def count(asked, batch):
        size = tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0]
        now = state.read_value()
        updated = tf.tensor_scatter_nd_update(
            now,
            [[0], [1], [2], [3 + now[0] % 256]],
            tf.stack([now[0] + 1, now[1] + size, now[2] + nanoseconds() - asked, size]),
        )
        with tf.control_dependencies([state.assign(updated)]):
            return tf.nest.map_structure(tf.identity, batch)

    if graph_count._gets_prefetch_injected(dataset):
        dataset = dataset.prefetch(tf.data.AUTOTUNE)
    clock = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat()
    clock = graph_count._inline_map(clock, lambda _: nanoseconds())
    return graph_count._inline_map(tf.data.Dataset.zip((clock, dataset)), count).prefetch(0)


class _SizesUnknown:
    """Known batch sizes of no input: every batch weighed by the count's stage."""

    of = fixed = of_pipeline = staticmethod(lambda source: None)


@contextlib.contextmanager
def weighed(on: bool):
    """The monitor weighing each batch, as it does for an input whose batch sizes it cannot
    know before the fit (a ``map`` after the batching, a ``PyDataset``, a generator)."""
    known = graph_count.KnownBatches
    if on:
        graph_count.KnownBatches = _SizesUnknown
    try:
        yield
    finally:
        graph_count.KnownBatches = known


@contextlib.contextmanager
def no_stage(on: bool):
    """The monitor without the stage: no count, no wait share (the rest of its cost)."""
    attach = GraphCount.attach
    if on:
        GraphCount.attach = classmethod(lambda cls, *arguments, **keywords: None)
    try:
        yield
    finally:
        GraphCount.attach = attach


def pipeline(batches: int) -> tf.data.Dataset:
    x = np.random.default_rng(0).normal(size=(batches * BATCH, 8)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH).prefetch(8)


def seconds_per_batch(dataset: tf.data.Dataset, batches: int) -> float:
    take = tf.function(lambda iterator: iterator.get_next())
    iterator = iter(dataset)
    take(iterator)  # traced and warmed up outside the timing
    start = time.perf_counter()
    for _ in range(batches - 1):
        take(iterator)
    return (time.perf_counter() - start) / (batches - 1)


def take_side(side: str, batches: int) -> float:
    dataset = pipeline(batches)
    if side == "timed, earlier stage":
        dataset = earlier_stage(GraphCount(recent=256), dataset)
    elif side != "bare":
        dataset = GraphCount(recent=256, timed=side != "counted").counting(dataset)
    return seconds_per_batch(dataset, batches)


def fit_side(
    side: str, steps_per_execution: int, epochs: int, log_dir: str, arrays: bool = False
) -> float:
    """Seconds per epoch of epochs 2 on."""
    x = np.random.default_rng(1).normal(size=(STEPS_PER_EPOCH * BATCH, 32)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH).prefetch(-1)
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    clock = EpochStarts()
    callbacks = [clock]
    if side != "bare":
        input_wait = side != "monitor, input_wait=False"
        callbacks.append(GPUMonitor(log_dir, interval=1.0, input_wait=input_wait))
    with weighed(side == "monitor, weighed"), no_stage(side == "monitor, no stage"):
        if arrays:
            model.fit(
                x, x[:, :1], batch_size=BATCH, epochs=epochs + 1, verbose=0, callbacks=callbacks
            )
        else:
            model.fit(data, epochs=epochs + 1, verbose=0, callbacks=callbacks)
    return (clock.starts[-1] - clock.starts[1]) / epochs


def compare(sides, measure, rounds: int, per: str, units: int) -> None:
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    for round_number in range(rounds):
        shift = round_number % len(sides)
        for side in sides[shift:] + sides[:shift]:
            seconds[side].append(measure(side))
        print(
            f"  round {round_number}: "
            + ", ".join(f"{side} {1e6 * seconds[side][-1] / units:.1f} us/{per}" for side in sides)
        )
    for side in sides[1:]:
        found = paired_ratio([a / b for a, b in zip(seconds[side], seconds["bare"], strict=True)])
        added = statistics.median(
            1e6 * (a - b) / units for a, b in zip(seconds[side], seconds["bare"], strict=True)
        )
        print(
            f"  {side} / bare: "
            + ratio_text(found.median, found.low, found.high, paired_words(rounds, found.coverage))
            + f", median {added:+.1f} us per {per}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--fit-rounds", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--part", choices=("take", "fit", "both"), default="both")
    parser.add_argument("--input", choices=("dataset", "arrays"), default="dataset")
    args = parser.parse_args()
    if args.part in ("take", "both"):
        print("one batch taken by a tf.function:")
        sides = ["bare", "counted", "timed", "timed, earlier stage"]
        compare(sides, lambda side: take_side(side, args.batches), args.rounds, "batch", 1)
    if args.part in ("fit", "both"):
        sides = [
            "bare",
            "monitor",
            "monitor, weighed",
            "monitor, input_wait=False",
            "monitor, no stage",
        ]
        with tempfile.TemporaryDirectory() as log_dir:
            for steps_per_execution in (1, 128):
                print(
                    f"launch-bound fit on {args.input}, steps_per_execution={steps_per_execution}:"
                )
                compare(
                    sides,
                    lambda side, spe=steps_per_execution: fit_side(
                        side, spe, args.epochs, log_dir, arrays=args.input == "arrays"
                    ),
                    args.fit_rounds,
                    "step",
                    STEPS_PER_EPOCH,
                )
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
