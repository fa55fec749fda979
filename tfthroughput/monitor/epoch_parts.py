"""The phases of an epoch, measured apart: its training steps, then its validation, if any.

Keras runs an epoch's validation inside the epoch (``on_test_begin`` to ``on_test_end``, both
before ``on_epoch_end``), so figures over the whole epoch mix two workloads: a fit that
validates on a large set reports the validation's pace as training's. The monitor therefore
ends the training part of the epoch when validation begins, measures the validation on its
own, and keeps the epoch's wall time, validation included, apart from both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.events import WALL_SECONDS, energy_joules, epoch_figures
from tfthroughput.monitor.example_count import Snapshot, mean_through, settled_batches
from tfthroughput.monitor.input_wait import PhaseWait


@dataclass(frozen=True)
class PhasePart:
    """What one phase measured.

    Attributes:
        stats: The statistics of the samples taken in it.
        seconds: Its wall time, or None when it was never begun (hooks driven by hand).
        steps: Steps taken in it (optimizer steps in training, batches in validation), if
            known.
        batch_size: Examples per step, if known.
        wait_percent: Share of its wall time the loop waited for its next batch, where that
            is measured (:mod:`tfthroughput.monitor.input_wait`).
    """

    stats: WindowStats
    seconds: float | None
    steps: int | None
    batch_size: int | None
    wait_percent: float | None = None

    def figures(self) -> dict[str, float]:
        """Its wall time, steps/s, examples/s and joules per example, as far as known."""
        return epoch_figures(
            self.seconds, self.steps, self.batch_size, joules=energy_joules(self.stats)
        )


@dataclass(frozen=True)
class EpochParts:
    """One epoch, phase by phase.

    Attributes:
        training: Its training steps: from the epoch's start to the validation's start (the
            epoch's end without validation).
        validation: Its validation, or None if the epoch did not validate.
        wall_seconds: From the epoch's start to its end, validation included (None when it
            was never begun).
    """

    training: PhasePart
    validation: PhasePart | None
    wall_seconds: float | None

    def training_figures(self) -> dict[str, float]:
        """The training figures, with the epoch's ``wall_seconds`` where known."""
        figures = self.training.figures()
        if self.wall_seconds is not None and self.wall_seconds > 0:
            figures[WALL_SECONDS] = self.wall_seconds
        return figures


class OpenValidation:
    """The validation in progress. Its batch count is set from Keras's batch hook, on Keras's
    callback thread on backends that dispatch callbacks asynchronously (Keras waits for those
    hooks before ``on_test_end``).

    Args:
        start: When it began, on the monitor's clock.
        batch_size: Examples per validation batch, if known.

    Attributes:
        count: Reads the count of the examples of the validation's batches, where one is
            kept (:mod:`tfthroughput.monitor.example_count`): exact, short batches included,
            where ``batch_size`` is not.
        wait: The validation's wait for its batches, where its count keeps one
            (:meth:`wait_on`).
    """

    def __init__(self, start: float, batch_size: int | None) -> None:
        self.start = start
        self.batch_size = batch_size
        self.count: Callable[[], Snapshot] | None = None
        self.wait = PhaseWait(None)
        self.batches = 0
        self.ended: PhasePart | None = None

    def wait_on(self, waited: Callable[[], float | None] | None) -> None:
        """Measure the wait from ``waited`` (the seconds waited so far), from now on."""
        self.wait = PhaseWait(waited)
        self.wait.begin()

    def batch_end(self, batch: int) -> None:
        self.batches = max(self.batches, batch + 1)

    def end(self, stats: WindowStats, now: float) -> PhasePart:
        batches = settled_batches(self.batches, self.count) or None
        batch_size = mean_through(self.count, batches) or self.batch_size
        seconds = now - self.start
        self.ended = PhasePart(stats, seconds, batches, batch_size, self.wait.phase(seconds))
        return self.ended
