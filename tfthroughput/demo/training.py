"""One monitored training run of the demo: the small CNN with GPUMonitor and Keras's TensorBoard
writing windows inside each epoch, summarised as the report summarises it."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable

import keras
import numpy as np

from tfthroughput.demo.comparison import RunSummary
from tfthroughput.demo.image_task import naive_pipeline, small_cnn, tuned_pipeline
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.monitor.gpu_monitor import GPUMonitor
from tfthroughput.report.steady_epochs import steady_median

WINDOWS_PER_EPOCH = 4

Print = Callable[[str], None]


def window_steps_for(steps_per_epoch: int, windows: int = WINDOWS_PER_EPOCH) -> int:
    """Steps per window: the divisor of ``steps_per_epoch`` nearest ``windows`` per epoch.

    Keras's ``TensorBoard(update_freq=N)`` writes its ``epoch_*`` charts only when its count
    of training batches is a multiple of ``N`` at the epoch's end, so ``N`` must divide the
    steps per epoch (on a tie, the smaller window).

    Example:
        >>> window_steps_for(40), window_steps_for(38), window_steps_for(7), window_steps_for(2)
        (10, 19, 1, 1)
    """
    divisors = [d for d in range(1, steps_per_epoch + 1) if steps_per_epoch % d == 0]
    return min(divisors, key=lambda d: (abs(steps_per_epoch / d - windows), d))


class _EpochLine(keras.callbacks.Callback):
    """One short progress line per epoch (Keras's own would list every logged metric)."""

    def __init__(self, epochs: int, echo: Print) -> None:
        super().__init__()
        self.epochs = epochs
        self.echo = echo

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.echo(
            f"  epoch {epoch + 1}/{self.epochs}: loss {logs.get('loss', float('nan')):.3f}, "
            f"{logs.get('examples_per_second', float('nan')):,.0f} examples/s, "
            f"host CPU {logs.get('host_cpu_percent', float('nan')):.0f} %"
        )


def train(
    name: str,
    dataset,
    epochs: int,
    batch_size: int,
    log_dir: str,
    echo: Print = print,
    window_steps: int | str = "epoch",
) -> RunSummary:
    """Train the small CNN with the monitor (windows every ``window_steps``) and TensorBoard."""
    model = small_cnn()
    run_dir = os.path.join(log_dir, name)
    monitor = GPUMonitor(
        run_dir,
        interval=0.25,
        batch_size=batch_size,
        update_logs=True,
        update_freq=window_steps,
    )
    board = keras.callbacks.TensorBoard(run_dir, update_freq=window_steps)  # same x-axis
    callbacks = [monitor, board, _EpochLine(epochs, echo)]  # after the monitor: see its logs
    history = model.fit(
        dataset, epochs=epochs, callbacks=callbacks, verbose=0, shuffle=False
    ).history
    gpu_keys = sorted(
        k for k in history if k.startswith("gpu") and k.endswith("_utilization_percent")
    )
    per_gpu = [history[k] for k in gpu_keys]
    gpu_per_epoch = [float(np.mean(values)) for values in zip(*per_gpu, strict=True)]
    cpu_per_epoch = history.get("host_cpu_percent")
    return RunSummary(
        name=name,
        examples_per_second=steady_median(history["examples_per_second"]),
        epoch_seconds=steady_median(history["seconds"]),
        gpu_utilization_percent=steady_median(gpu_per_epoch) if gpu_per_epoch else None,
        cpu_percent=steady_median(cpu_per_epoch) if cpu_per_epoch else None,
        epochs=len(history["seconds"]),
        epoch_examples_per_second=tuple(history["examples_per_second"]),
    )


def train_both(
    paths: list[str],
    labels: np.ndarray,
    epochs: int,
    batch_size: int,
    log_dir: str,
    echo: Print,
) -> list[RunSummary]:
    """Train the small CNN on the naive pipeline, then on build_pipeline, each monitored."""
    window_steps = window_steps_for(math.ceil(len(paths) / batch_size))
    runs = []
    for step, (name, make) in enumerate(
        (("naive", naive_pipeline), ("build_pipeline", tuned_pipeline)), start=2
    ):
        echo(f"[{step}/4] Training a small CNN on the {name} pipeline ({epochs} epochs)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MonitoringWarning)  # said once, above
            dataset = make(paths, labels, batch_size)
            runs.append(train(name, dataset, epochs, batch_size, log_dir, echo, window_steps))
    return runs
