"""What does GPUMonitor's per-epoch cluster exchange cost?

Starts two MultiWorkerMirroredStrategy workers on loopback (127.0.0.1, free ports) and times,
on each, alternated round by round after a warm-up:

- exchange: ``all_gather_rows``, what GPUMonitor runs once per epoch (one all-reduce of a
  2 x 11 float64 matrix);
- gather: ``strategy.gather`` of the same row (two collectives: the shapes, then the values);
- scalar: an all-reduce of one float, the smallest collective the strategy can run.

Each call waits for both workers, so its time is one collective round trip. The summary is the
exchange's median over the scalar all-reduce's median. On a shared 2-core machine the two
workers and TensorFlow's threads compete for the cores: figures are noisy. TensorFlow's gRPC
servers listen on every interface (whatever TF_CONFIG says) for the few seconds this runs.

    python benchmarks/cluster_exchange.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROW = tuple(float(i) for i in range(11))
KINDS = ("exchange", "gather", "scalar")


def _worker(rounds: int) -> None:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    from tfthroughput.monitor.cluster_exchange import all_gather_rows
    from tfthroughput.monitor.strategy import find_placement

    placement = find_placement(_Model(strategy))  # this worker's rank, as GPUMonitor finds it
    workers = len(placement.worker_names)

    def exchange():
        all_gather_rows(strategy, ROW, placement.rank, workers)

    def gather():
        row = tf.constant([ROW], dtype=tf.float64)
        value = strategy.experimental_distribute_values_from_function(lambda _: tf.identity(row))
        strategy.gather(value, axis=0).numpy()

    def scalar():
        one = tf.constant(1.0, dtype=tf.float64)
        value = strategy.experimental_distribute_values_from_function(lambda _: tf.identity(one))
        strategy.reduce("SUM", value, axis=None).numpy()

    calls = {"exchange": exchange, "gather": gather, "scalar": scalar}
    for call in calls.values():  # warm-up: collective groups, kernels
        for _ in range(3):
            call()
    seconds = {kind: [] for kind in KINDS}
    for round_index in range(rounds):
        order = KINDS if round_index % 2 == 0 else tuple(reversed(KINDS))
        for kind in order:
            start = time.perf_counter()
            calls[kind]()
            seconds[kind].append(time.perf_counter() - start)
    print("RESULT " + json.dumps(seconds), flush=True)
    os._exit(0)


class _Model:
    """Just enough of a model for `find_placement`: its strategy."""

    def __init__(self, strategy) -> None:
        self.distribute_strategy = strategy


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        _worker(args.rounds)
        return
    ports = [_free_port(), _free_port()]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    workers = []
    for index in range(2):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
            PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]),
        )
        command = [sys.executable, __file__, "--rounds", str(args.rounds), "--worker", str(index)]
        workers.append(
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
        )
    results = []
    try:
        for worker in workers:
            output, _ = worker.communicate(timeout=600)
            line = [text for text in output.splitlines() if text.startswith("RESULT ")][-1]
            results.append(json.loads(line.removeprefix("RESULT ")))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    medians = {kind: statistics.median(s for r in results for s in r[kind]) for kind in KINDS}
    print(f"{'collective':<10}  {'median ms (both workers)':>24}  {'per worker':>20}")
    for kind in KINDS:
        each = "  ".join(f"{statistics.median(r[kind]) * 1000:8.2f}" for r in results)
        print(f"{kind:<10}  {medians[kind] * 1000:24.2f}  {each:>20}")
    print(
        f"exchange {medians['exchange'] * 1000:.2f} ms per epoch = "
        f"{medians['exchange'] / medians['scalar']:.2f}x a one-float all-reduce "
        f"({medians['scalar'] * 1000:.2f} ms); strategy.gather {medians['gather'] * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
