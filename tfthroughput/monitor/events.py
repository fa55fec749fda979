"""One epoch's statistics as TensorBoard scalars and ``logs`` entries, and the writer for them.

Samples arrive keyed by :class:`~tfthroughput.hardware.sampler.SampleKey` pairs; this module
alone joins a pair into text: ``gpu0/utilization_percent/mean`` for TensorBoard, and
``gpu0_utilization_percent`` for ``logs``.

Events are written with TensorBoard's own pure-Python record writer (the framing its
``EventFileWriter`` and PyTorch's ``SummaryWriter`` use) on a plain file, so the monitor needs no
TensorFlow and works under every Keras backend. ``EventFileWriter`` itself is not used: it opens
files through ``tensorboard.compat.tf``, which imports TensorFlow whenever it is installed, even
under the JAX backend.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
import warnings
from collections.abc import Mapping, Sequence

from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.summary.writer.record_writer import RecordWriter

from tfthroughput.hardware.activity import (
    BUSY_BUT_IDLE,
    busy_but_idle_percent,
    overstates_work,
    utilization_and_sm_activity,
)
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.dashboard import WINDOW_PREFIX, layout_summary

# Names of the per-epoch figures: tags `epoch/<name>`, `logs` keys `<name>`; the same figures of
# a window inside an epoch are `window/<name>`.
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
    read from a hardware sample buffer), energy totals, ``<source>/busy_but_idle_percent``
    (where SM activity was read) and ``epoch/<figure>``."""
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
    for source, gap in _busy_but_idle(stats).items():
        scalars[f"{source}/{BUSY_BUT_IDLE}"] = gap
    for name, value in figures.items():
        scalars[f"epoch/{name}"] = value
    return scalars


def window_scalars(
    stats: WindowStats, statistics: Sequence[str], figures: Mapping[str, float]
) -> dict[str, float]:
    """The scalars of one window inside an epoch: the epoch's tags under ``window/``.

    ``window/<source>/<metric>/<statistic>``, ``window/<source>/samples``, the window's energy
    and busy-but-idle gap, and ``window/<figure>`` (``window/seconds``,
    ``window/steps_per_second``, ...). A prefix of their own keeps them apart from the per-epoch
    tags, whose x-axis is the epoch, and groups them in TensorBoard's Scalars tab, where their
    x-axis is the training step as for Keras's ``batch_*`` tags.
    """
    scalars = {
        f"{WINDOW_PREFIX}{tag}": value
        for tag, value in hardware_scalars(stats, statistics, {}).items()
    }
    scalars.update({f"{WINDOW_PREFIX}{name}": value for name, value in figures.items()})
    return scalars


def logs_entries(stats: WindowStats, figures: Mapping[str, float]) -> dict[str, float]:
    """What ``update_logs=True`` adds to ``logs``: each metric's epoch mean, energy totals,
    each GPU's ``busy_but_idle_percent`` (where SM activity was read) and the figures.

    Keys have no ``epoch`` prefix and no ``/``: ``keras.callbacks.TensorBoard`` writes a logs key
    ``k`` as the tag ``epoch_k``, so ``gpu0_utilization_percent`` and ``seconds`` become
    ``epoch_gpu0_utilization_percent`` and ``epoch_seconds`` there, and ``CSVLogger`` and
    ``History`` see the same plain names.
    """
    entries = {f"{key.source}_{key.metric}": value.mean for key, value in stats.items()}
    for key, total in stats.totals.items():
        entries[f"{key.source}_{key.metric}"] = total.amount
    entries.update(
        {f"{source}_{BUSY_BUT_IDLE}": gap for source, gap in _busy_but_idle(stats).items()}
    )
    entries.update(figures)
    return entries


def overstated_utilization_warning(stats: WindowStats, epoch: int) -> str | None:
    """The warning to give when an epoch's GPU-Util overstates the work, else ``None``.

    It does when a GPU's mean GPU-Util is above 20 % and at least twice its mean SM activity
    (:func:`tfthroughput.hardware.activity.overstates_work`).
    """
    for source, (utilization, sm_activity) in utilization_and_sm_activity(stats).items():
        if overstates_work(utilization, sm_activity):
            times = f"{utilization / sm_activity:.0f}x" if sm_activity > 0 else "far"
            return (
                f"{source}: GPU-Util {utilization:.1f} % but SM activity {sm_activity:.1f} % in "
                f"epoch {epoch}: kernels were running, yet they kept few SMs busy (typically "
                f"many tiny kernels, so launch overhead sets the pace), and GPU-Util overstates "
                f"the work {times}. `{source}/{BUSY_BUT_IDLE}` logs the gap every epoch; "
                "tfthroughput.diagnose says what to change (a larger batch, XLA, mixed "
                "precision). Warned once per fit."
            )
    return None


def _busy_but_idle(stats: WindowStats) -> dict[str, float]:
    return {
        source: busy_but_idle_percent(utilization, sm_activity)
        for source, (utilization, sm_activity) in utilization_and_sm_activity(stats).items()
    }


def scalar_summary(scalars: Mapping[str, float]) -> summary_pb2.Summary:
    """One ``Summary`` holding every scalar, as ``tf.summary.scalar`` stores a scalar: a float32
    rank-0 tensor with the scalars plugin's metadata.

    Built field by field: byte for byte what ``tensorboard.summary.scalar_pb`` makes, at about
    1/50 of its cost per tag (it goes through NumPy and a generic tensor conversion).
    """
    summary = summary_pb2.Summary()
    for tag, value in scalars.items():
        entry = summary.value.add(tag=tag, metadata=_SCALAR_METADATA)
        entry.tensor.dtype = types_pb2.DT_FLOAT
        entry.tensor.tensor_shape.SetInParent()  # rank 0: present and empty
        entry.tensor.float_val.append(float(value))
    return summary


_SCALAR_METADATA = scalar_metadata.create_summary_metadata(display_name=None, description=None)
# Event files of one process need distinct names even within one second.
_file_numbers = itertools.count()


def _serialized(**fields) -> bytes:
    return event_pb2.Event(**fields).SerializeToString()


class EventWriter:
    """The event file of the hardware run.

    Opened in ``on_train_begin`` (so an unwritable folder fails before the first epoch);
    written from the training thread, and once from the sampler thread when ``fit`` is left
    without ``on_train_end``, and from the threads that end windows, hence the lock. Each write
    is flushed, so TensorBoard sees an epoch or a window as soon as it ends. A fault while
    writing is warned about, never raised: it must not stop training.

    The file is named as ``tf.summary`` names its files
    (``events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2``) and holds the same records.

    Args:
        run_dir: The run's folder, created if missing.
        log_dir: The ``log_dir`` argument, for the error message.

    Raises:
        ValueError: If ``run_dir`` cannot be created or written to.
    """

    def __init__(self, run_dir: str, log_dir: str) -> None:
        try:
            os.makedirs(run_dir, exist_ok=True)
            # Creating the event file itself is the test that the folder can be written.
            name = "events.out.tfevents.%010d.%s.%d.%d.v2" % (  # noqa: UP031 - TF's own pattern
                time.time(),
                socket.gethostname(),
                os.getpid(),
                next(_file_numbers),
            )
            writer = RecordWriter(open(os.path.join(run_dir, name), "wb"))  # noqa: SIM115
            try:
                now = time.time()
                writer.write(_serialized(wall_time=now, file_version="brain.Event:2"))
                writer.flush()
            except OSError:
                writer.close()
                raise
        except OSError as error:
            raise ValueError(
                f"`log_dir` is not writable ({error.strerror or error}); GPUMonitor needs to "
                f"create {run_dir!r}. Received: log_dir={log_dir!r}"
            ) from error
        self.run_dir = run_dir
        self._lock = threading.Lock()
        self._writer: RecordWriter | None = writer  # closed in close()

    def write(self, step: int, scalars: Mapping[str, float], *, what: str = "epoch") -> None:
        """Write every scalar at ``step`` as one event, then flush.

        ``what`` names the step in a warning: ``"epoch"`` or ``"the window at step"``.
        """
        self._write_summary(step, scalar_summary(scalars), f"{what} {step}")

    def write_layout(self, layout) -> None:
        """Write the Custom Scalars layout (TensorBoard shows the latest one written)."""
        self._write_summary(0, layout_summary(layout), "the Custom Scalars layout")

    def _write_summary(self, step: int, summary: summary_pb2.Summary, what: str) -> None:
        with self._lock:
            if self._writer is None:
                return
            try:
                self._writer.write(_serialized(wall_time=time.time(), step=step, summary=summary))
                self._writer.flush()
            except Exception as error:  # noqa: BLE001 - a writer fault must not stop training
                warnings.warn(
                    f"GPUMonitor could not write {what} to {self.run_dir!r}: {error!r}",
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
