"""How much does GPUMonitor slow the `fit` it measures?

Two measurements, at the default interval (1 s) and at 0.1 s, each per epoch only
(`update_freq="epoch"`, the default) and with windows inside epochs (`update_freq="10s"`, or
`--window`):

1. End to end: the same `fit` with and without the monitor, alternating which goes first,
   median of the per-pair ratios (monitored / bare) of wall time and of process CPU time (all
   threads; the sampler thread's work shows up there). On a shared 2-core VM single fits vary
   by several percent, so these ratios carry that noise; their spread is printed.
2. Direct cost, which noise does not blur: the time spent inside the monitor's per-epoch and
   per-fit hooks during a monitored fit, plus the time the sampler thread spends deciding on
   and writing windows, plus the time one sample takes (`Sampler.sample_once` on the default
   sources) times the number of samples, plus the time one call of the per-step hook takes
   (`on_train_batch_end`, the whole call, timed in isolation) times the number of steps, over
   the bare fit's time. The per-step hook is costed like a sample, from an isolated timing:
   timed in place at every step, the measurement would mostly count the time the OS gives to
   other threads and processes while the clock runs. Sampling runs on its own thread and
   mostly outside the GIL-bound part of training, so this is an upper bound.

Targets: <= 1.005 at 1 s and <= 1.02 at 0.1 s, with and without windows.

    python benchmarks/monitor_overhead.py [--repeats 9] [--epochs 3] [--examples 48000]
        [--window 10s]
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
from tfthroughput.hardware import Sampler, default_sources
from tfthroughput.monitor.epoch_windows import parse_update_freq  # noqa: E402

BATCH_SIZE = 64


class TimedMonitor(GPUMonitor):
    """GPUMonitor that adds up the wall time spent in its own hooks and window decisions."""

    hook_seconds = 0.0  # on the training thread
    tick_seconds = 0.0  # on the sampler thread: is a window due? then cut and write it
    windows = 0

    def _timed(self, name, *args):
        start = time.perf_counter()
        getattr(super(), name)(*args)
        self.hook_seconds += time.perf_counter() - start

    def _window_tick(self, training):
        start = time.perf_counter()
        super()._window_tick(training)
        self.tick_seconds += time.perf_counter() - start

    def on_train_begin(self, logs=None):
        self._timed("on_train_begin", logs)

    def on_epoch_begin(self, epoch, logs=None):
        self._timed("on_epoch_begin", epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._timed("on_epoch_end", epoch, logs)

    def on_train_end(self, logs=None):
        self.windows += self.window_count
        self._timed("on_train_end", logs)


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


def timed_fit(model, x, y, epochs: int, callbacks) -> tuple[float, float]:
    """Wall seconds and process CPU seconds (all threads) of one fit."""
    start, cpu_start = time.perf_counter(), time.process_time()
    model.fit(x, y, batch_size=BATCH_SIZE, epochs=epochs, verbose=0, callbacks=callbacks)
    return time.perf_counter() - start, time.process_time() - cpu_start


def seconds_per_sample(samples: int = 300) -> float:
    sampler = Sampler(default_sources(), interval=1.0)
    sampler.sample_once()  # first call pays lazy set-up
    start = time.perf_counter()
    for _ in range(samples):
        sampler.sample_once()
    elapsed = time.perf_counter() - start
    sampler.stop()
    return elapsed / samples


def seconds_per_step_hook(update_freq, calls: int = 200_000) -> float:
    """One call of the monitor's per-step hook, in a started monitor between window ends."""
    seconds = parse_update_freq(update_freq).seconds
    # The sampler thread barely wakes while the hook is timed: at most once per window.
    interval = seconds if seconds is not None else 5.0
    monitor = GPUMonitor(tempfile.mkdtemp(), interval=interval, update_freq=update_freq)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    monitor.set_model(model)
    monitor.set_params({"epochs": 1, "steps": None})
    with monitor:
        monitor.on_train_begin()
        monitor.on_epoch_begin(0)
        hook = monitor.on_train_batch_end
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                hook(0)  # step 1 again and again: no window of 2 steps or more is due
            best = min(best, (time.perf_counter() - start) / calls)
        monitor.on_epoch_end(0)
        monitor.on_train_end()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--examples", type=int, default=48_000)
    parser.add_argument("--window", default="10s", help="update_freq of the windowed mode")
    args = parser.parse_args()
    warnings.simplefilter("ignore", MonitoringWarning)  # "no GPU here" is expected on CPU boxes

    sample_seconds = seconds_per_sample()
    sources = ", ".join(source.name for source in default_sources())
    print(f"one sample of [{sources}] takes {sample_seconds * 1e6:.0f} us")
    steps = args.epochs * -(-args.examples // BATCH_SIZE)
    hook_seconds = {mode: seconds_per_step_hook(mode) for mode in ("epoch", args.window)}
    print(
        "one call of the per-step hook takes "
        + ", ".join(f"{s * 1e9:.0f} ns ({mode})" for mode, s in hook_seconds.items())
        + f"; {steps} steps per fit"
    )
    model, x, y = build(args.examples)
    timed_fit(model, x, y, 1, [])  # trace and warm up once
    summary = []
    with tempfile.TemporaryDirectory() as log_root:
        for update_freq, interval in (
            ("epoch", 1.0),
            ("epoch", 0.1),
            (args.window, 1.0),
            (args.window, 0.1),
        ):
            ratios, cpu_ratios, bare_times, direct, windows = [], [], [], [], []
            for repeat in range(args.repeats):
                log_dir = os.path.join(log_root, f"{update_freq}-i{interval}-{repeat}")
                monitor = TimedMonitor(log_dir, interval, update_freq=update_freq)
                order = ("bare", "monitored") if repeat % 2 == 0 else ("monitored", "bare")
                times = {}
                for variant in order:
                    callbacks = [monitor] if variant == "monitored" else []
                    times[variant] = timed_fit(model, x, y, args.epochs, callbacks)
                (bare, bare_cpu), (monitored, monitored_cpu) = times["bare"], times["monitored"]
                bare_times.append(bare)
                ratios.append(monitored / bare)
                cpu_ratios.append(monitored_cpu / bare_cpu)
                cost = (
                    monitor.hook_seconds
                    + monitor.tick_seconds
                    + (monitored / interval) * sample_seconds
                    + steps * hook_seconds[update_freq]
                )
                direct.append(1 + cost / bare)
                windows.append(monitor.windows if update_freq != "epoch" else 0)
            ratio, direct_ratio = statistics.median(ratios), statistics.median(direct)
            cpu_ratio = statistics.median(cpu_ratios)
            mode = "per epoch" if update_freq == "epoch" else f"windows {update_freq}"
            print(
                f"{mode}, interval={interval:>4} s: bare fit "
                f"{statistics.median(bare_times):.2f} s; "
                f"windows per fit {statistics.median(windows):.0f}; "
                f"wall-time ratio {ratio:.4f} (pairs {min(ratios):.3f}..{max(ratios):.3f}); "
                f"CPU-time ratio {cpu_ratio:.4f} "
                f"(pairs {min(cpu_ratios):.3f}..{max(cpu_ratios):.3f}); "
                f"direct cost ratio {direct_ratio:.5f}"
            )
            summary.append((mode, interval, ratio, cpu_ratio, direct_ratio))
    print(
        "monitor overhead: "
        + "; ".join(
            f"{mode} at {interval} s: wall {ratio:.3f}x, CPU {cpu_ratio:.3f}x, "
            f"direct {direct_ratio:.4f}x"
            for mode, interval, ratio, cpu_ratio, direct_ratio in summary
        )
        + " (targets <= 1.005 at 1 s, <= 1.02 at 0.1 s)"
    )


if __name__ == "__main__":
    main()
