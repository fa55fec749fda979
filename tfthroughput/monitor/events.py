"""One epoch's statistics as TensorBoard scalars and ``logs`` entries.

Samples arrive keyed by :class:`~tfthroughput.hardware.sampler.SampleKey` pairs; this module
alone joins a pair into text: ``gpu0/utilization_percent/mean`` for TensorBoard, and
``gpu0_utilization_percent`` for ``logs``. :mod:`tfthroughput.monitor.event_writer` writes the
scalars into the run's event file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tensorboard.compat.proto import summary_pb2, types_pb2
from tensorboard.plugins.scalar import metadata as scalar_metadata

from tfthroughput.hardware.activity import (
    BUSY_BUT_IDLE,
    busy_but_idle_percent,
    overstates_work,
    utilization_and_sm_activity,
)
from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.dashboard import WINDOW_PREFIX
from tfthroughput.monitor.input_wait import LOGS_KEY as WAIT_LOGS_KEY
from tfthroughput.monitor.input_wait import TAG as WAIT_TAG

# Names of the figures of a phase: the training steps of an epoch are tagged `epoch/<name>`
# (`logs` keys `<name>`), its validation `validation/<name>` (`logs` keys `val_<name>`), an
# `evaluate` or `predict` call `evaluate/<name>` or `predict/<name>`; the same figures of a
# window are `window/<name>` (`<phase>/window/<name>` for a call).
EPOCH_FIGURES = ("seconds", "steps_per_second", "examples_per_second", "joules_per_example")
# The epoch's wall time, validation included: `epoch/wall_seconds`, `logs` key `wall_seconds`.
WALL_SECONDS = "wall_seconds"
# Tag prefix of the validation inside `fit`, and `logs` prefix (Keras's own for validation).
VALIDATION = "validation"
VALIDATION_LOGS_PREFIX = "val_"


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
    """A phase's wall time, throughput and energy per example, as far as they are known.

    Args:
        seconds: The phase's wall time (an epoch's training steps, its validation, a call of
            ``evaluate`` or ``predict``, or a window); ``None`` for one cut short.
        steps: Steps taken in it (optimizer steps in training, batches otherwise), if known.
        batch_size: Examples per step, if known.
        joules: Energy the GPUs used in it, if known.

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
    *,
    phase: str | None = None,
    wait_percent: float | None = None,
) -> dict[str, float]:
    """The scalars of one phase: ``<source>/<metric>/<statistic>``, the sample counts
    (``<source>/samples`` for the monitor's reads, ``<source>/<metric>/samples`` for a metric
    read from a hardware sample buffer), energy totals, ``<source>/busy_but_idle_percent``
    (where SM activity was read), ``input/wait_percent`` (where measured) and
    ``epoch/<figure>``.

    Args:
        stats: The phase's statistics.
        statistics: The statistics to log.
        figures: Its :func:`epoch_figures` (and ``wall_seconds`` for an epoch).
        phase: ``None`` for an epoch's training steps (the tags above); else the prefix of
            every tag, figures included: ``"validation"`` gives
            ``validation/gpu0/utilization_percent/mean`` and ``validation/seconds``.
        wait_percent: The share of the phase spent waiting for batches, if measured.
    """
    if phase is not None:
        return {
            f"{phase}/{tag.removeprefix('epoch/')}": value
            for tag, value in hardware_scalars(
                stats, statistics, figures, wait_percent=wait_percent
            ).items()
        }
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
    if wait_percent is not None:
        scalars[WAIT_TAG] = wait_percent
    for name, value in figures.items():
        scalars[f"epoch/{name}"] = value
    return scalars


def window_scalars(
    stats: WindowStats,
    statistics: Sequence[str],
    figures: Mapping[str, float],
    *,
    phase: str | None = None,
    wait_percent: float | None = None,
) -> dict[str, float]:
    """The scalars of one window inside an epoch: the epoch's tags under ``window/``
    (``<phase>/window/`` for a window of an ``evaluate`` or ``predict`` call).

    ``window/<source>/<metric>/<statistic>``, ``window/<source>/samples``, the window's energy
    and busy-but-idle gap, and ``window/<figure>`` (``window/seconds``,
    ``window/steps_per_second``, ...). A prefix of their own keeps them apart from the per-epoch
    tags, whose x-axis is the epoch, and groups them in TensorBoard's Scalars tab, where their
    x-axis is the training step as for Keras's ``batch_*`` tags.
    """
    prefix = WINDOW_PREFIX if phase is None else f"{phase}/{WINDOW_PREFIX}"
    scalars = {
        f"{prefix}{tag}": value
        for tag, value in hardware_scalars(stats, statistics, {}, wait_percent=wait_percent).items()
    }
    scalars.update({f"{prefix}{name}": value for name, value in figures.items()})
    return scalars


def logs_entries(
    stats: WindowStats,
    figures: Mapping[str, float],
    *,
    prefix: str = "",
    wait_percent: float | None = None,
) -> dict[str, float]:
    """What ``update_logs=True`` adds to ``logs``: each metric's epoch mean, energy totals,
    each GPU's ``busy_but_idle_percent`` (where SM activity was read), ``input_wait_percent``
    (where measured) and the figures, each key after ``prefix`` (``"val_"`` for the
    validation, as Keras names its own).

    Keys have no ``epoch`` prefix and no ``/``: ``keras.callbacks.TensorBoard`` writes a logs key
    ``k`` as the tag ``epoch_k``, so ``gpu0_utilization_percent`` and ``seconds`` become
    ``epoch_gpu0_utilization_percent`` and ``epoch_seconds`` there, and ``CSVLogger`` and
    ``History`` see the same plain names. Keras's TensorBoard writes a ``val_k`` key into its
    ``validation`` run as ``epoch_k``, so there the validation's ``val_seconds`` is drawn as
    ``epoch_seconds`` beside the training's, as ``val_loss`` is beside ``loss``.
    """
    entries = {f"{key.source}_{key.metric}": value.mean for key, value in stats.items()}
    for key, total in stats.totals.items():
        entries[f"{key.source}_{key.metric}"] = total.amount
    entries.update(
        {f"{source}_{BUSY_BUT_IDLE}": gap for source, gap in _busy_but_idle(stats).items()}
    )
    if wait_percent is not None:
        entries[WAIT_LOGS_KEY] = wait_percent
    entries.update(figures)
    return {f"{prefix}{key}": value for key, value in entries.items()}


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
