"""tf.data service scaling: a pipeline read locally vs through 1, 2 and 4 worker processes.

Two sources, each read by ``build_pipeline(..., batch_size=32, repeat=True)``, locally and with
``service=DataService(address, processing_mode=...)`` on a local tf.data service whose workers
are separate OS processes on loopback (``LocalDataService(n, processes=True)``, one cluster per
worker count, all started before the first measurement):

- latency-bound: each element waits 5 ms (tf.data's ``sleep`` transformation: TensorFlow's own
  op, since a ``py_function`` cannot run in another process), one element after another, like a
  remote store answering one request at a time. More workers wait in parallel, so they help even
  on 2 cores. Read locally and through 1, 2 and 4 workers.
- CPU-bound: each element costs a few ms of matrix products in the parallel ``preprocess_fn``.
  Read locally and through 1 worker: the cost of the hop (transfer, compression) when the worker
  shares the trainer's cores.

Each measurement times ``--batches`` (latency-bound) or ``--cpu-batches`` batches of 32 after
the first (the job's start is excluded);
the cases alternate within each of ``--repeats`` rounds and the medians are compared.

Run: ``python benchmarks/service_scaling.py [--batches 20] [--cpu-batches 60] [--repeats 5]
[--mode parallel_epochs|distributed_epoch]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tensorflow as tf  # noqa: E402
from tensorflow.python.data.experimental.ops import testing as tf_data_testing  # noqa: E402

from tfthroughput import build_pipeline  # noqa: E402
from tfthroughput.data.service import DataService  # noqa: E402
from tfthroughput.data.service_cluster import LocalDataService  # noqa: E402

BATCH_SIZE = 32
LATENCY_MICROSECONDS = 5000
WORKER_COUNTS = (1, 2, 4)


def latency_bound_source() -> tf.data.Dataset:
    """Elements that each wait 5 ms, one after another."""
    waiting = tf.data.Dataset.range(10**9).apply(tf_data_testing.sleep(LATENCY_MICROSECONDS))
    return waiting.map(lambda i: tf.fill([64], tf.cast(i, tf.float32)))


def cpu_heavy(index: tf.Tensor) -> tf.Tensor:
    """A few ms of CPU: products of a 128x128 matrix derived from the element."""
    matrix = tf.random.stateless_normal([128, 128], seed=tf.stack([index, index]))
    for _ in range(6):
        matrix = tf.tanh(tf.matmul(matrix, matrix) / 128.0)
    return tf.reduce_mean(matrix, axis=0)


def pipeline(case: str, address: str | None, mode: str) -> tf.data.Dataset:
    service = DataService(address, processing_mode=mode) if address else None
    if case == "latency":
        return build_pipeline(
            latency_bound_source(), batch_size=BATCH_SIZE, repeat=True, service=service
        )
    return build_pipeline(
        tf.data.Dataset.range(10**9),
        preprocess_fn=cpu_heavy,
        batch_size=BATCH_SIZE,
        repeat=True,
        service=service,
    )


def examples_per_second(dataset: tf.data.Dataset, batches: int) -> float:
    iterator = iter(dataset)
    next(iterator)  # the job starts, the workers fill their buffers
    start = time.perf_counter()
    examples = 0
    for _ in range(batches):
        examples += int(next(iterator).shape[0])
    return examples / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20, help="latency-bound batches timed")
    parser.add_argument("--cpu-batches", type=int, default=60, help="CPU-bound batches timed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--mode", choices=("parallel_epochs", "distributed_epoch"), default="parallel_epochs"
    )
    args = parser.parse_args(argv)

    started = time.perf_counter()
    clusters = {n: LocalDataService(n, processes=True) for n in WORKER_COUNTS}
    print(f"started {sum(WORKER_COUNTS)} worker processes in {time.perf_counter() - started:.1f} s")
    cases = [("latency", None), *[("latency", n) for n in WORKER_COUNTS], ("cpu", None), ("cpu", 1)]
    rates: dict[tuple[str, int | None], list[float]] = {case: [] for case in cases}
    try:
        for repeat in range(args.repeats):
            for case, workers in cases:  # alternated, a fresh pipeline (and job) each time
                address = clusters[workers].address if workers else None
                batches = args.batches if case == "latency" else args.cpu_batches
                rate = examples_per_second(pipeline(case, address, args.mode), batches)
                rates[case, workers].append(rate)
                where = f"service, {workers} worker(s)" if workers else "local"
                print(f"repeat {repeat + 1}: {case:<7} {where:<22} {rate:8.1f} examples/s")
    finally:
        for cluster in clusters.values():
            cluster.stop()
    median = {case: statistics.median(values) for case, values in rates.items()}
    for (case, workers), rate in median.items():
        where = f"service, {workers} worker(s)" if workers else "local"
        print(f"{case:<7} {where:<22} median {rate:8.1f} examples/s")
    four_vs_one = median["latency", 4] / median["latency", 1]
    two_vs_one = median["latency", 2] / median["latency", 1]
    one_vs_local = median["latency", 1] / median["latency", None]
    hop = median["cpu", None] / median["cpu", 1]  # service time / local time
    print(
        f"SUMMARY service_scaling ({args.mode}): latency-bound 4 workers {four_vs_one:.2f}x "
        f"1 worker (target >= 3), 2 workers {two_vs_one:.2f}x, 1 worker {one_vs_local:.2f}x "
        f"local; CPU-bound 1 worker takes {hop:.2f}x the local time (target <= 1.25)"
    )


if __name__ == "__main__":
    main()
