"""What a run hands its sinks (TensorBoard first) for one window or one epoch: a
:class:`~tfthroughput.sinks.Measurement` with its scalars and figures.

An epoch of a ``fit`` carries its training part's tags untagged and its validation's under
``validation/``; a call of ``evaluate`` or ``predict`` has one phase, every tag under
``<phase>/``; a window's tags are under ``window/`` (``<phase>/window/``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tfthroughput.monitor.epoch_parts import EpochParts
from tfthroughput.monitor.epoch_windows import Window
from tfthroughput.monitor.events import (
    VALIDATION,
    energy_joules,
    epoch_figures,
    hardware_scalars,
    window_scalars,
)
from tfthroughput.sinks.sink import Measurement


def epoch_measurement(
    epoch: int,
    parts: EpochParts,
    *,
    step: int,
    statistics: Sequence[str],
    batch_size: int | None,
    phase: str | None,
) -> Measurement:
    """An epoch's phases (or a call's one phase) as one measurement at ``step=epoch``.

    Args:
        epoch: The epoch (or the call's number).
        parts: The epoch phase by phase.
        step: The optimizer steps completed (batches of such calls, for a call).
        statistics: The statistics to log.
        batch_size: Examples per step, if known.
        phase: ``None`` for a ``fit``; ``"evaluate"`` or ``"predict"`` for such a call.
    """
    training = parts.training
    if phase is not None:  # a call of evaluate or predict: one phase, prefixed
        figures = training.figures()
        scalars = hardware_scalars(
            training.stats, statistics, figures, phase=phase, wait_percent=training.wait_percent
        )
    else:
        figures = parts.training_figures()
        scalars = hardware_scalars(
            training.stats, statistics, figures, wait_percent=training.wait_percent
        )
        if parts.validation is not None:
            validation = parts.validation
            scalars.update(
                hardware_scalars(
                    validation.stats,
                    statistics,
                    validation.figures(),
                    phase=VALIDATION,
                    wait_percent=validation.wait_percent,
                )
            )
    return Measurement(
        "epoch",
        epoch,
        step,
        training.steps,
        figures.get("seconds"),
        batch_size,
        scalars,
        figures,
        training.stats,
        training.wait_percent,
    )


def window_measurement(
    window: Window, *, statistics: Sequence[str], batch_size: int | None, phase: str | None
) -> Measurement:
    """A window as one measurement at its step (``window/`` tags)."""
    figures = epoch_figures(
        window.seconds, window.steps, batch_size, joules=energy_joules(window.stats)
    )
    return Measurement(
        "window",
        window.epoch,
        window.step,
        window.steps,
        window.seconds,
        batch_size,
        window_scalars(
            window.stats, statistics, figures, phase=phase, wait_percent=window.wait_percent
        ),
        figures,
        window.stats,
        window.wait_percent,
    )
