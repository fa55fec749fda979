"""What the counting and timing stage (``input/wait_percent``) adds to each batch a step takes.

Keras's TensorFlow backend takes each batch inside the compiled step (``iterator.get_next()``),
one call per step with ``steps_per_execution=1``: the worst case for a per-batch cost, since a
launch-bound step takes well under a millisecond. This times exactly that loop, a
``tf.function`` that takes one batch of a fast in-memory pipeline (``from_tensor_slices``,
``batch``, ``prefetch``), called once per batch from Python, over the bare pipeline (A) and over
the same pipeline through ``GraphCount.counting`` (B: the counting and timing stage, as without
a strategy; C: the counting stage alone, as under a strategy), alternated round by round. It
prints the median of the per-round ratios B / A and C / A with their range, and the median
added microseconds per batch of each; the load average is printed too (the development
machines are shared).

    python benchmarks/input_wait_cost.py [--rounds 8] [--batches 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfthroughput.monitor.graph_count import GraphCount  # noqa: E402


def pipeline(batches: int) -> tf.data.Dataset:
    x = np.random.default_rng(0).normal(size=(batches * 16, 8)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(16).prefetch(8)


def seconds_per_batch(dataset: tf.data.Dataset, batches: int) -> float:
    take = tf.function(lambda iterator: iterator.get_next())
    iterator = iter(dataset)
    take(iterator)  # traced and warmed up outside the timing
    start = time.perf_counter()
    for _ in range(batches - 1):
        take(iterator)
    return (time.perf_counter() - start) / (batches - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=2000)
    args = parser.parse_args()
    sides = ["bare", "timed", "counted"]
    ratios: dict[str, list[float]] = {"timed": [], "counted": []}
    added: dict[str, list[float]] = {"timed": [], "counted": []}
    for round_number in range(args.rounds):
        seconds = {}
        for side in sides[round_number % 3 :] + sides[: round_number % 3]:  # rotated
            dataset = pipeline(args.batches)
            if side != "bare":
                dataset = GraphCount(recent=256, timed=side == "timed").counting(dataset)
            seconds[side] = seconds_per_batch(dataset, args.batches)
        for side in ratios:
            ratios[side].append(seconds[side] / seconds["bare"])
            added[side].append(1e6 * (seconds[side] - seconds["bare"]))
        print(
            f"round {round_number}: "
            + ", ".join(f"{side} {1e6 * seconds[side]:.1f} us/batch" for side in sides)
        )
    print(f"load average: {os.getloadavg()[0]:.2f}")
    for side, name in (("counted", "counting stage alone"), ("timed", "counting and timing")):
        print(
            f"{name}: {statistics.median(ratios[side]):.3f}x per batch taken "
            f"[{min(ratios[side]):.3f}-{max(ratios[side]):.3f}] over {args.rounds} rounds, "
            f"median {statistics.median(added[side]):+.1f} us per batch"
        )


if __name__ == "__main__":
    main()
