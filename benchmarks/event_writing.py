"""What writing one epoch's scalars costs: the monitor's writer against `tf.summary`.

The monitor writes each epoch's scalars (about 40 with two GPUs and the host) as one event,
flushed. It now hands the scalars to a writer thread of its own (monitor/event_writer.py), so
what is timed for it here is what the training thread spends: the hand-off. It used to write
from the training thread, through
`tf.summary` (each tag made with TensorBoard's `scalar_pb`, one `write_raw_pb`, a flush); it
now builds the protos itself and writes them with TensorBoard's pure-Python record writer,
which needs no TensorFlow. Both are timed here on the same scalars, alternated, medians of
several rounds; the files are read back to check they hold the same values.

    python benchmarks/event_writing.py [--rounds 9] [--writes 50] [--gpus 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])

import tensorflow as tf  # noqa: E402
from tensorboard.compat.proto import summary_pb2  # noqa: E402
from tensorboard.plugins.scalar.summary import scalar_pb  # noqa: E402

from tfthroughput.hardware.metrics import GPU_METRICS, HOST_METRICS  # noqa: E402
from tfthroughput.monitor.event_writer import EventWriter  # noqa: E402

STATISTICS = ("mean", "min", "max", "p95")


def epoch_scalars(gpus: int) -> dict[str, float]:
    scalars = {}
    sources = [(f"gpu{i}", GPU_METRICS) for i in range(gpus)] + [("host", HOST_METRICS)]
    for source, metrics in sources:
        for n, metric in enumerate(metrics):
            for statistic in STATISTICS:
                scalars[f"{source}/{metric.name}/{statistic}"] = 10.0 + n
        scalars[f"{source}/samples"] = 60
    scalars.update({"epoch/seconds": 3.5, "epoch/steps_per_second": 214.3})
    return scalars


class TfSummaryWriter:
    """The monitor's previous writer: tf.summary with one raw summary per epoch."""

    def __init__(self, run_dir: str) -> None:
        self._writer = tf.summary.create_file_writer(run_dir)

    def write(self, step: int, scalars: dict[str, float]) -> None:
        summary = summary_pb2.Summary()
        for tag, value in scalars.items():
            summary.value.extend(scalar_pb(tag, value).value)
        with self._writer.as_default():
            tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def time_writes(writer, scalars: dict[str, float], writes: int) -> float:
    """Median seconds of one epoch's write."""
    times = []
    for step in range(writes):
        start = time.perf_counter()
        writer.write(step, scalars)
        times.append(time.perf_counter() - start)
    writer.close()
    return statistics.median(times)


def read_back(run_dir: str) -> dict[str, float]:
    values = {}
    (path,) = [os.path.join(run_dir, name) for name in os.listdir(run_dir)]
    for event in tf.compat.v1.train.summary_iterator(path):
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name == "scalars":
                values[(event.step, value.tag)] = float(tf.make_ndarray(value.tensor))
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--writes", type=int, default=50, help="epochs written per round")
    parser.add_argument("--gpus", type=int, default=2)
    args = parser.parse_args()
    scalars = epoch_scalars(args.gpus)
    results = {"tf.summary": [], "monitor": []}
    with tempfile.TemporaryDirectory() as root:
        for round_ in range(args.rounds):
            order = ["tf.summary", "monitor"] if round_ % 2 == 0 else ["monitor", "tf.summary"]
            for name in order:
                run_dir = os.path.join(root, f"{name}-{round_}")
                writer = (
                    EventWriter(run_dir, root) if name == "monitor" else TfSummaryWriter(run_dir)
                )
                results[name].append(time_writes(writer, scalars, args.writes))
        same = read_back(os.path.join(root, "monitor-0")) == read_back(
            os.path.join(root, "tf.summary-0")
        )
    old, new = (statistics.median(results[name]) for name in ("tf.summary", "monitor"))
    for name, times in results.items():
        print(
            f"{name:>10}: {statistics.median(times) * 1e6:8.0f} us per epoch write "
            f"(rounds {min(times) * 1e6:.0f}..{max(times) * 1e6:.0f} us)"
        )
    print(
        f"event writing: {len(scalars)} scalars per epoch, monitor {new * 1e6:.0f} us vs "
        f"tf.summary {old * 1e6:.0f} us: {new / old:.3f}x the time "
        f"({'same' if same else 'DIFFERENT'} values read back)"
    )


if __name__ == "__main__":
    main()
