"""One epoch's statistics as TensorBoard scalars and ``logs`` entries, and the writer for them.

Samples arrive keyed by :class:`~tfthroughput.hardware.sampler.SampleKey` pairs; this module
alone joins a pair into text: ``gpu0/utilization_percent/mean`` for TensorBoard, and
``gpu0_utilization_percent`` for ``logs``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence

import tensorflow as tf
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.scalar.summary import scalar_pb

from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.hardware.window import WindowStats
from tfthroughput.monitor.dashboard import write_layout

# Names of the per-epoch figures: tags `epoch/<name>`, `logs` keys `<name>`.
EPOCH_FIGURES = ("seconds", "steps_per_second", "examples_per_second", "joules_per_example")


def energy_joules(stats: WindowStats) -> float | None:
    """Energy all GPUs used in the window, in joules; ``None`` where no GPU reports it."""
    joules = [total.amount for key, total in stats.totals.items() if key.metric == "energy_joules"]
    return sum(joules) if joules else None


def epoch_figures(
    seconds: float | None,
    steps: int | None,
    batch_size: int | None,
    *,
    joules: float | None = None,
) -> dict[str, float]:
    """The epoch's wall time, throughput and energy per example, as far as they are known.

    Args:
        seconds: The epoch's wall time; ``None`` for an epoch cut short.
        steps: Optimizer steps taken in the epoch, if known.
        batch_size: Examples per step, if known.
        joules: Energy the GPUs used in the epoch, if known.

    Returns:
        ``{"seconds": ..., "steps_per_second": ..., "examples_per_second": ...,
        "joules_per_example": ...}``, each only when it can be computed.
    """
    if seconds is None or seconds <= 0:
        return {}
    figures = {"seconds": seconds}
    if steps:
        figures["steps_per_second"] = steps / seconds
        if batch_size:
            figures["examples_per_second"] = steps * batch_size / seconds
            if joules is not None:
                figures["joules_per_example"] = joules / (steps * batch_size)
    return figures


def hardware_scalars(
    stats: WindowStats,
    statistics: Sequence[str],
    figures: Mapping[str, float],
) -> dict[str, float]:
    """The scalars of the hardware run: ``<source>/<metric>/<statistic>``, the sample counts
    (``<source>/samples`` for the monitor's reads, ``<source>/<metric>/samples`` for a metric
    read from a hardware sample buffer), energy totals and ``epoch/<figure>``."""
    scalars: dict[str, float] = {}
    samples: dict[str, int] = {}
    for key, metric_stats in stats.items():
        for statistic in statistics:
            scalars[f"{key.source}/{key.metric}/{statistic}"] = getattr(metric_stats, statistic)
        if key in stats.buffer_samples:  # NVML's own samples: their count, not the reads
            scalars[f"{key.source}/{key.metric}/samples"] = stats.buffer_samples[key]
            continue
        samples[key.source] = max(samples.get(key.source, 0), metric_stats.count)
    for source, count in samples.items():
        scalars[f"{source}/samples"] = count
    for key, total in stats.totals.items():  # energy: an increase over the window
        scalars[f"{key.source}/{key.metric}"] = total.amount
        scalars[f"{key.source}/{key.metric}/from_counter"] = float(total.counter)
    for name, value in figures.items():
        scalars[f"epoch/{name}"] = value
    return scalars


def logs_entries(stats: WindowStats, figures: Mapping[str, float]) -> dict[str, float]:
    """What ``update_logs=True`` adds to ``logs``: each metric's epoch mean and the figures.

    Keys have no ``epoch`` prefix and no ``/``: ``keras.callbacks.TensorBoard`` writes a logs key
    ``k`` as the tag ``epoch_k``, so ``gpu0_utilization_percent`` and ``seconds`` become
    ``epoch_gpu0_utilization_percent`` and ``epoch_seconds`` there, and ``CSVLogger`` and
    ``History`` see the same plain names.
    """
    entries = {f"{key.source}_{key.metric}": value.mean for key, value in stats.items()}
    for key, total in stats.totals.items():
        entries[f"{key.source}_{key.metric}"] = total.amount
    entries.update(figures)
    return entries


class EventWriter:
    """The event file of the hardware run, with the Custom Scalars layout already in it.

    Opened in ``on_train_begin`` (so an unwritable folder fails before the first epoch);
    written from the training thread, and once from the sampler thread when ``fit`` is left
    without ``on_train_end``, hence the lock. A fault while writing is warned about, never
    raised: it must not stop training.

    Args:
        run_dir: The run's folder, created if missing.
        log_dir: The ``log_dir`` argument, for the error message.

    Raises:
        ValueError: If ``run_dir`` cannot be created or written to.
    """

    def __init__(self, run_dir: str, log_dir: str) -> None:
        try:
            os.makedirs(run_dir, exist_ok=True)
            with tempfile.TemporaryFile(dir=run_dir):
                pass
        except OSError as error:
            raise ValueError(
                f"`log_dir` is not writable ({error.strerror or error}); GPUMonitor needs to "
                f"create {run_dir!r}. Received: log_dir={log_dir!r}"
            ) from error
        self.run_dir = run_dir
        self._lock = threading.Lock()
        self._writer = tf.summary.create_file_writer(run_dir)
        write_layout(self._writer)

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        """Write every scalar at ``step`` as one raw summary, then flush."""
        with self._lock:
            if self._writer is None:
                return
            try:
                # One summary holding every scalar: one write op instead of one per tag
                # (about 8x cheaper at the end of each epoch than tf.summary.scalar per tag).
                summary = summary_pb2.Summary()
                for tag, value in scalars.items():
                    summary.value.extend(scalar_pb(tag, value).value)
                with self._writer.as_default():
                    tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=step)
                self._writer.flush()
            except Exception as error:  # noqa: BLE001 - a writer fault must not stop training
                warnings.warn(
                    f"GPUMonitor could not write epoch {step} to {self.run_dir!r}: {error!r}",
                    MonitoringWarning,
                    stacklevel=3,
                )

    def close(self) -> None:
        """Close the file; later writes are ignored."""
        with self._lock:
            writer, self._writer = self._writer, None
            if writer is None:
                return
            try:
                writer.close()
            except Exception as error:  # noqa: BLE001
                warnings.warn(
                    f"GPUMonitor could not close its writer: {error!r}",
                    MonitoringWarning,
                    stacklevel=3,
                )
