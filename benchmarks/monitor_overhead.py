"""How much does GPUMonitor slow the `fit` (and the `predict`) it measures?

Every fit validates each epoch (a validation set a quarter the size of the training set), so the
monitor measures both phases apart; then `predict` over the training set is measured the same
way, monitored against bare. Two measurements, at the default interval (1 s) and at 0.1 s, each
per epoch only (`update_freq="epoch"`, the default) and with windows inside epochs
(`update_freq="10s"`, or `--window`):

1. End to end: the same `fit` with and without the monitor, alternating which goes first,
   median of the per-pair ratios (monitored / bare) of wall time and of process CPU time (all
   threads; the sampler thread's work shows up there). On a shared 2-core VM single fits vary
   by several percent, so these ratios carry that noise; their spread is printed.
2. Direct cost, which noise does not blur: the time spent inside the monitor's per-epoch and
   per-fit hooks during a monitored fit, plus the time the sampler thread spends deciding on
   and writing windows, plus the time one sample takes (`Sampler.sample_once` on the default
   sources) times the number of samples, plus the time one call of the per-step hooks takes
   (`on_train_batch_end`, and `on_test_batch_end` or `on_predict_batch_end`, the whole call,
   timed in isolation) times the number of steps and batches, over the bare call's time. The
   per-step hooks are costed like a sample, from an isolated timing: timed in place at every
   step, the measurement would mostly count the time the OS gives to other threads and
   processes while the clock runs. Sampling runs on its own thread and
   mostly outside the GIL-bound part of training, so this is an upper bound.

Targets: <= 1.005 at 1 s and <= 1.02 at 0.1 s, with and without windows.

With ``--sink mlflow`` the monitor also hands its figures to an ``MLflowSink`` logging into a
real ``mlflow server`` (SQLite store) started on loopback for the run (or ``--mlflow-uri``);
the CPU time of the sink's sending thread (its whole life: ``log_batch`` calls, wake-ups) is
added to the direct cost, like the sampler's work; its wall time, mostly spent waiting for the
server with the GIL released, is printed beside it. The hooks' time includes opening the sink;
the end of ``fit`` does not wait for the last send (its CPU time is counted all the same).
With ``--sink prometheus`` a ``PrometheusSink`` serves the figures on loopback and a ``curl``
loop scrapes it every second (Prometheus's default is every 15 s).

    python benchmarks/monitor_overhead.py [--repeats 9] [--epochs 3] [--examples 48000]
        [--validation-batch 6]
        [--window 10s] [--sink {none,mlflow,prometheus}] [--mlflow-uri URI]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfthroughput import GPUMonitor, MonitoringWarning  # noqa: E402
from tfthroughput.hardware import Sampler, default_sources
from tfthroughput.monitor.epoch_windows import parse_update_freq  # noqa: E402

BATCH_SIZE = 64
VALIDATION_BATCH = BATCH_SIZE  # set from --validation-batch


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

    def on_test_begin(self, logs=None):
        self._timed("on_test_begin", logs)

    def on_test_end(self, logs=None):
        self._timed("on_test_end", logs)

    def on_predict_begin(self, logs=None):
        self._timed("on_predict_begin", logs)

    def on_predict_end(self, logs=None):
        self._timed("on_predict_end", logs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def background(command: list[str], env: dict | None = None):
    """A helper process (server, scraper) in its own process group, ended on exit."""
    process = subprocess.Popen(
        command,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        os.killpg(process.pid, 15)
        process.wait()


@contextlib.contextmanager
def mlflow_tracking(uri: str | None, folder: str):
    """An active MLflow run on ``uri``, or on a loopback ``mlflow server`` started for it."""
    import mlflow

    with contextlib.ExitStack() as stack:
        if uri is None:
            port = free_port()
            uri = f"http://127.0.0.1:{port}"
            stack.enter_context(
                background(
                    [
                        *(sys.executable, "-m", "mlflow", "server"),
                        *("--backend-store-uri", f"sqlite:///{folder}/mlflow.db"),
                        *("--artifacts-destination", f"{folder}/artifacts"),
                        *("--host", "127.0.0.1", "--port", str(port)),
                        *("--waitress-opts", "--threads=4"),
                    ],
                    env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                )
            )
            deadline = time.monotonic() + 180
            while True:
                try:
                    urllib.request.urlopen(f"{uri}/health", timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("mlflow server did not start") from None
                    time.sleep(0.5)
        mlflow.set_tracking_uri(uri)
        stack.enter_context(mlflow.start_run(run_name="monitor_overhead"))
        print(f"MLflowSink logs to {uri}")
        yield


def make_sink_factory(sink: str):
    """A factory of fresh sinks for each monitored fit, and what their threads spent."""
    if sink == "none":
        return (lambda: []), (lambda: 0.0)
    if sink == "prometheus":
        from tfthroughput.sinks import PrometheusSink

        port = free_port()
        return (lambda: [PrometheusSink(port=port)]), (lambda: 0.0)
    from tfthroughput.sinks import MLflowSink, mlflow_sink
    from tfthroughput.sinks._mlflow_sender import MetricSender

    class TimedSender(MetricSender):
        # The sending thread's whole life: the CPU time it takes from the training process
        # (its log_batch calls, its wake-ups), and its wall time (mostly waiting on the
        # server, GIL released; after the fit's end, the last send runs beside what follows).
        cpu_seconds = 0.0
        wall_seconds = 0.0

        def _run(self):
            start, cpu_start = time.perf_counter(), time.thread_time()
            super()._run()
            TimedSender.cpu_seconds += time.thread_time() - cpu_start
            TimedSender.wall_seconds += time.perf_counter() - start

    mlflow_sink.MetricSender = TimedSender
    made: list[MLflowSink] = []

    def new_sinks() -> list[MLflowSink]:
        made.append(MLflowSink())
        return made[-1:]

    def spent() -> float:
        """The sending threads' CPU seconds since the last call (their wall time printed)."""
        for sink in made:
            sink.wait_until_sent()  # the last send ends after fit returns: count all of it
        made.clear()
        cpu, TimedSender.cpu_seconds = TimedSender.cpu_seconds, 0.0
        wall, TimedSender.wall_seconds = TimedSender.wall_seconds, 0.0
        print(f"  MLflowSink thread: {cpu:.3f} s CPU, {wall:.3f} s wall")
        return cpu

    return new_sinks, spent


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
    """Wall seconds and process CPU seconds (all threads) of one fit, validating each epoch on
    the last quarter of the data, in batches of ``VALIDATION_BATCH`` (``--validation-batch``;
    a small one makes the many short validation batches of a heavy validation)."""
    train = len(x) * 4 // 5
    start, cpu_start = time.perf_counter(), time.process_time()
    model.fit(
        x[:train],
        y[:train],
        batch_size=BATCH_SIZE,
        epochs=epochs,
        verbose=0,
        callbacks=callbacks,
        validation_data=(x[train:], y[train:]),
        validation_batch_size=VALIDATION_BATCH,
    )
    return time.perf_counter() - start, time.process_time() - cpu_start


def timed_predict(model, x, callbacks) -> tuple[float, float]:
    """Wall seconds and process CPU seconds (all threads) of one predict."""
    start, cpu_start = time.perf_counter(), time.process_time()
    model.predict(x, batch_size=BATCH_SIZE, verbose=0, callbacks=callbacks)
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


def seconds_per_step_hook(update_freq, calls: int = 200_000) -> tuple[float, float, float]:
    """One call of the monitor's per-step hooks (training, validation, predict), in a started
    monitor between window ends."""
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
        monitor.on_test_begin()  # the epoch's validation, then one of its batch hooks
        test_hook = monitor.on_test_batch_end
        best_test = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                test_hook(0)
            best_test = min(best_test, (time.perf_counter() - start) / calls)
        monitor.on_test_end()
        monitor.on_epoch_end(0)
        monitor.on_train_end()
        monitor.on_predict_begin()  # a predict call, then one of its batch hooks
        predict_hook = monitor.on_predict_batch_end
        best_predict = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                predict_hook(0)  # batch 1 again and again: no window of 2 batches is due
            best_predict = min(best_predict, (time.perf_counter() - start) / calls)
        monitor.on_predict_end()
    return best, best_test, best_predict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--examples", type=int, default=48_000)
    parser.add_argument(
        "--validation-batch", type=int, default=None, help="validation batch size (default: fit's)"
    )
    parser.add_argument("--window", default="10s", help="update_freq of the windowed mode")
    parser.add_argument("--sink", choices=("none", "mlflow", "prometheus"), default="none")
    parser.add_argument("--mlflow-uri", default=None, help="tracking server for --sink mlflow")
    args = parser.parse_args()
    warnings.simplefilter("ignore", MonitoringWarning)  # "no GPU here" is expected on CPU boxes
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        if args.sink == "mlflow":
            stack.enter_context(mlflow_tracking(args.mlflow_uri, folder))
        run(args, *make_sink_factory(args.sink), stack)


def run(args, new_sinks, sink_thread_seconds, stack) -> None:
    global VALIDATION_BATCH
    VALIDATION_BATCH = args.validation_batch or BATCH_SIZE

    sample_seconds = seconds_per_sample()
    sources = ", ".join(source.name for source in default_sources())
    print(f"one sample of [{sources}] takes {sample_seconds * 1e6:.0f} us")
    train = args.examples * 4 // 5
    steps = args.epochs * -(-train // BATCH_SIZE)
    validation_batches = args.epochs * -(-(args.examples - train) // VALIDATION_BATCH)
    predict_batches = -(-args.examples // BATCH_SIZE)
    hook_seconds = {mode: seconds_per_step_hook(mode) for mode in ("epoch", args.window)}
    print(
        "one call of the per-step hooks (training, validation, predict) takes "
        + ", ".join(
            f"{' / '.join(f'{s * 1e9:.0f}' for s in seconds)} ns ({mode})"
            for mode, seconds in hook_seconds.items()
        )
        + f"; {steps} steps and {validation_batches} validation batches per fit, "
        f"{predict_batches} batches per predict"
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
                sinks = new_sinks()
                monitor = TimedMonitor(log_dir, interval, update_freq=update_freq, sinks=sinks)
                if args.sink == "prometheus" and repeat == 0 and update_freq == "epoch":
                    url = f"http://127.0.0.1:{sinks[0].requested_port}/metrics"
                    scrape = f"while true; do curl -s -o /dev/null {url}; sleep 1; done"
                    stack.enter_context(background(["sh", "-c", scrape]))
                order = ("bare", "monitored") if repeat % 2 == 0 else ("monitored", "bare")
                times = {}
                for variant in order:
                    callbacks = [monitor] if variant == "monitored" else []
                    times[variant] = timed_fit(model, x, y, args.epochs, callbacks)
                (bare, bare_cpu), (monitored, monitored_cpu) = times["bare"], times["monitored"]
                bare_times.append(bare)
                ratios.append(monitored / bare)
                cpu_ratios.append(monitored_cpu / bare_cpu)
                train_hook, test_hook, _ = hook_seconds[update_freq]
                cost = (
                    monitor.hook_seconds
                    + monitor.tick_seconds
                    + (monitored / interval) * sample_seconds
                    + steps * train_hook
                    + validation_batches * test_hook
                    + sink_thread_seconds()
                )
                direct.append(1 + cost / bare)
                windows.append(monitor.windows if update_freq != "epoch" else 0)
            ratio, direct_ratio = statistics.median(ratios), statistics.median(direct)
            cpu_ratio = statistics.median(cpu_ratios)
            mode = "per epoch" if update_freq == "epoch" else f"windows {update_freq}"
            mode += "" if args.sink == "none" else f", {args.sink} sink"
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
        for update_freq, interval in (("epoch", 1.0), ("epoch", 0.1), (args.window, 0.1)):
            ratios, cpu_ratios, bare_times, direct = [], [], [], []
            for repeat in range(args.repeats):
                log_dir = os.path.join(log_root, f"predict-{update_freq}-i{interval}-{repeat}")
                monitor = TimedMonitor(log_dir, interval, update_freq=update_freq)
                order = ("bare", "monitored") if repeat % 2 == 0 else ("monitored", "bare")
                times = {}
                for variant in order:
                    callbacks = [monitor] if variant == "monitored" else []
                    times[variant] = timed_predict(model, x, callbacks)
                (bare, bare_cpu), (monitored, monitored_cpu) = times["bare"], times["monitored"]
                bare_times.append(bare)
                ratios.append(monitored / bare)
                cpu_ratios.append(monitored_cpu / bare_cpu)
                cost = (
                    monitor.hook_seconds
                    + monitor.tick_seconds
                    + (monitored / interval) * sample_seconds
                    + predict_batches * hook_seconds[update_freq][2]
                )
                direct.append(1 + cost / bare)
            ratio, direct_ratio = statistics.median(ratios), statistics.median(direct)
            cpu_ratio = statistics.median(cpu_ratios)
            mode = "predict" + ("" if update_freq == "epoch" else f", windows {update_freq}")
            print(
                f"{mode}, interval={interval:>4} s: bare predict "
                f"{statistics.median(bare_times):.2f} s; "
                f"wall-time ratio {ratio:.4f} (pairs {min(ratios):.3f}..{max(ratios):.3f}); "
                f"CPU-time ratio {cpu_ratio:.4f} "
                f"(pairs {min(cpu_ratios):.3f}..{max(cpu_ratios):.3f}); "
                f"direct cost ratio {direct_ratio:.5f}"
            )
            summary.append((mode, interval, ratio, cpu_ratio, direct_ratio))
    print(
        f"load average {', '.join(f'{load:.2f}' for load in os.getloadavg())}; "
        "monitor overhead (fits validate every epoch): "
        + "; ".join(
            f"{mode} at {interval} s: wall {ratio:.3f}x, CPU {cpu_ratio:.3f}x, "
            f"direct {direct_ratio:.4f}x"
            for mode, interval, ratio, cpu_ratio, direct_ratio in summary
        )
        + " (targets <= 1.005 at 1 s, <= 1.02 at 0.1 s)"
        + f"; load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
