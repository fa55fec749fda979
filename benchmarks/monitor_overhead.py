"""How much does GPUMonitor slow the `fit` it measures?

Runs the same small `fit` with and without the monitor, alternating which goes first, and
reports the median of the per-pair time ratios (monitored / bare) at the default interval
(1 s) and at 0.1 s. Target: <= 1.005 at 1 s and <= 1.02 at 0.1 s.

    python benchmarks/monitor_overhead.py [--repeats 7] [--epochs 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfthroughput import GPUMonitor, MonitoringWarning  # noqa: E402

BATCH_SIZE = 64


def build(examples: int):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, 64)).astype("float32")
    y = (x[:, :8].sum(axis=1) > 0).astype("int32")
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(2),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, x, y


def timed_fit(model, x, y, epochs: int, callbacks) -> float:
    start = time.perf_counter()
    model.fit(x, y, batch_size=BATCH_SIZE, epochs=epochs, verbose=0, callbacks=callbacks)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--examples", type=int, default=24_000)
    args = parser.parse_args()
    warnings.simplefilter("ignore", MonitoringWarning)  # "no GPU here" is expected on CPU boxes

    model, x, y = build(args.examples)
    timed_fit(model, x, y, 1, [])  # trace and warm up once
    summary = []
    with tempfile.TemporaryDirectory() as log_root:
        for interval in (1.0, 0.1):
            ratios, bare_times, monitored_times = [], [], []
            for repeat in range(args.repeats):
                monitor = GPUMonitor(os.path.join(log_root, f"i{interval}-{repeat}"), interval)
                order = ("bare", "monitored") if repeat % 2 == 0 else ("monitored", "bare")
                times = {}
                for variant in order:
                    callbacks = [monitor] if variant == "monitored" else []
                    times[variant] = timed_fit(model, x, y, args.epochs, callbacks)
                bare_times.append(times["bare"])
                monitored_times.append(times["monitored"])
                ratios.append(times["monitored"] / times["bare"])
            ratio = statistics.median(ratios)
            print(
                f"interval={interval:>4} s: bare {statistics.median(bare_times):.3f} s, "
                f"monitored {statistics.median(monitored_times):.3f} s, "
                f"median ratio {ratio:.4f} (pairs: {', '.join(f'{r:.3f}' for r in ratios)})"
            )
            summary.append((interval, ratio))
    (default_interval, default_ratio), (fast_interval, fast_ratio) = summary
    print(
        f"monitor overhead: {default_ratio:.4f}x at interval={default_interval} s "
        f"(target <= 1.005), {fast_ratio:.4f}x at interval={fast_interval} s (target <= 1.02)"
    )


if __name__ == "__main__":
    main()
