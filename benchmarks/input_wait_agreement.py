"""Does ``input/wait_percent`` agree with xprof's input share and with ``diagnose``?

Two workloads on the TensorFlow backend, each fitted with ``GPUMonitor`` (``update_logs=True``)
and ``ProfileSteps`` capturing steps of the second epoch:

- input-bound: batches of 32 from a pipeline whose sequential ``map`` sleeps ``--sleep-ms`` per
  batch (4 ms) in front of a 64-512-512-1 MLP whose step takes about 2 ms here;
- compute-bound: the same batches from memory (``cache``, ``prefetch``) into a wider MLP
  (64-2048-2048-1).

Three figures per run, in percent of the step time: the monitor's share over two of its
windows of 20 steps inside the second epoch (``update_freq=20``; its whole second epoch's
beside it), xprof's input share over the same 40 steps (the input-pipeline analyzer's per-step
table, its "Input" time over the step time, summed; the capture is one step wider on each side
because xprof's step analysis drops the first and last captured step), and ``diagnose``'s
input-bound fraction
(its own runs: the pipeline alone, the step alone on cached batches, both together), with
the step's time outside input in the profiled fit (xprof) beside diagnose's step alone and its
fit's step. Target: the monitor within 10 points of each.

    python benchmarks/input_wait_agreement.py [--runs 3] [--sleep-ms 4]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from xprof.convert import raw_to_tool_data  # noqa: E402

from tfthroughput import GPUMonitor, ProfileSteps, diagnose  # noqa: E402
from tfthroughput.report.folder_events import load_folder_events  # noqa: E402

BATCH = 32
STEPS_PER_EPOCH = 128
WINDOW = 20  # steps in each of the monitor's windows compared with the capture
FEATURES = 64


def pipeline(input_bound: bool, sleep_seconds: float) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS_PER_EPOCH * BATCH, FEATURES)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH)
    if not input_bound:
        return dataset.cache().prefetch(tf.data.AUTOTUNE)

    def slow(features, target):
        time.sleep(sleep_seconds)
        return features, target

    dataset = dataset.map(
        lambda a, b: tf.numpy_function(slow, [a, b], [tf.float32, tf.float32], stateful=True)
    )
    dataset = dataset.map(
        lambda a, b: (tf.ensure_shape(a, [None, FEATURES]), tf.ensure_shape(b, [None, 1]))
    )
    return dataset.prefetch(2)


def model(input_bound: bool) -> keras.Model:
    width = 512 if input_bound else 2048
    made = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    made.compile("sgd", "mse")
    return made


def xprof_input(log_dir: str) -> tuple[float, float]:
    """xprof's input share of the captured steps, from its input-pipeline analyzer, and their
    mean time outside input (milliseconds)."""
    traces = glob.glob(os.path.join(log_dir, "**", "*.xplane.pb"), recursive=True)
    data, _ = raw_to_tool_data.xspace_to_tool_data(traces, "input_pipeline_analyzer", {})
    table = json.loads(data)[1]
    columns = [column["id"] for column in table["cols"]]
    infeed, step = columns.index("infeedTimeMs"), columns.index("stepTimeMs")
    rows = [[cell["v"] for cell in row["c"]] for row in table["rows"]]
    waited, total = sum(row[infeed] for row in rows), sum(row[step] for row in rows)
    return 100.0 * waited / total, (total - waited) / len(rows)


def one_run(input_bound: bool, sleep_seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as log_dir:
        fitted = model(input_bound)
        # Two of the monitor's windows (WINDOW steps each, steps counted from 1) well inside
        # the second epoch, and a capture one step wider on each side: xprof's step analysis
        # drops the first and the last captured step, so both see the same steps.
        first = STEPS_PER_EPOCH + WINDOW + 1
        last = first + 2 * WINDOW - 1
        history = fitted.fit(
            pipeline(input_bound, sleep_seconds),
            epochs=3,
            verbose=0,
            callbacks=[
                GPUMonitor(log_dir, update_freq=WINDOW, update_logs=True),
                ProfileSteps(log_dir, step_range=(first - 1, last + 1)),
            ],
        )
        scalars = load_folder_events(os.path.join(log_dir, "hardware")).scalars
        shares = dict(scalars["window/input/wait_percent"])
        seconds = dict(scalars["window/seconds"])
        ends = (first + WINDOW - 1, last)
        windows = sum(shares[end] * seconds[end] for end in ends) / sum(
            seconds[end] for end in ends
        )
        xprof, busy = xprof_input(log_dir)
    report = diagnose(model(input_bound), pipeline(input_bound, sleep_seconds).repeat())
    return {
        "monitor": windows,
        "epoch": history.history["input_wait_percent"][1],
        "xprof": xprof,
        "diagnose": 100.0 * report.input_bound_fraction,
        "xprof_busy_ms": busy,
        "alone_ms": 1000.0 / report.compute_batches_per_second,
        "fit_ms": 1000.0 / report.fit_batches_per_second,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sleep-ms", type=float, default=4.0)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    for name, input_bound in (("input-bound", True), ("compute-bound", False)):
        runs = []
        for number in range(args.runs):
            runs.append(one_run(input_bound, args.sleep_ms / 1000))
            figures = runs[-1]
            print(
                f"{name} run {number}: monitor {figures['monitor']:.1f} % "
                f"(its epoch {figures['epoch']:.1f} %), "
                f"xprof {figures['xprof']:.1f} %, diagnose {figures['diagnose']:.1f} % "
                f"(a step outside input: {figures['xprof_busy_ms']:.2f} ms in the profiled fit, "
                f"{figures['alone_ms']:.2f} ms alone in diagnose; diagnose's fit step "
                f"{figures['fit_ms']:.2f} ms)",
                flush=True,
            )
        for other in ("xprof", "diagnose"):
            gaps = [run["monitor"] - run[other] for run in runs]
            print(
                f"{name}: monitor - {other} median {statistics.median(gaps):+.1f} points "
                f"[{min(gaps):+.1f} to {max(gaps):+.1f}] over {args.runs} runs"
            )
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
