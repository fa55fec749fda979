"""Windows inside an epoch: the ``update_freq`` setting and the bookkeeping of an epoch's windows.

A window is what the sampler measured between two cuts, with the training steps taken in it.
The monitor cuts windows on the sampler thread (every ``update_freq`` seconds) or in its batch
hook (every ``update_freq`` steps), and always at the epoch's end; the epoch's statistics are
those of all its windows' samples together, so cutting windows changes no epoch-level value.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace

from tfthroughput._validation import parse_duration
from tfthroughput.hardware.window_stats import WindowStats, merge_windows
from tfthroughput.monitor.input_wait import PhaseWait

PER_EPOCH = "epoch"


@dataclass(frozen=True)
class UpdateFrequency:
    """When windows end: once per epoch, every ``batches`` steps, or every ``seconds``.

    Attributes:
        batches: Optimizer steps per window, or None.
        seconds: Wall time per window, or None. Neither set: one window per epoch.
    """

    batches: int | None = None
    seconds: float | None = None

    @property
    def per_epoch(self) -> bool:
        return self.batches is None and self.seconds is None


def parse_update_freq(value: object) -> UpdateFrequency:
    """Read an ``update_freq`` argument, with Keras's meaning of the name.

    Args:
        value: ``"epoch"``; a positive int, a number of training steps (batches); or a
            duration with its unit as a string: ``"30s"``, ``"5min"``, ``"1h"``.

    Returns:
        The frequency.

    Raises:
        TypeError, ValueError: For anything else, naming the argument and the value.

    Example:
        >>> parse_update_freq("30s")
        UpdateFrequency(batches=None, seconds=30.0)
    """
    expected = (
        '`update_freq` must be "epoch", a positive int (training steps per window) or a '
        'duration with its unit ("30s", "5min", "1h")'
    )
    if value == PER_EPOCH:
        return UpdateFrequency()
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"{expected}. Received: update_freq={value!r}")
        return UpdateFrequency(batches=int(value))
    if isinstance(value, str):
        try:
            return UpdateFrequency(seconds=parse_duration("update_freq", value))
        except ValueError:
            raise ValueError(f"{expected}. Received: update_freq={value!r}") from None
    raise TypeError(f"{expected}. Received: update_freq={value!r}")


@dataclass(frozen=True)
class Window:
    """One window of a ``fit``, as the monitor wrote it.

    Attributes:
        index: Its position among the windows of the ``fit``, from 0.
        epoch: The epoch it belongs to.
        step: Optimizer steps completed when it ended (``model.optimizer.iterations``): the
            x-axis of its TensorBoard points, continuing across epochs and resumed runs.
        steps: Optimizer steps taken in it (at least 1).
        seconds: Its wall time.
        stats: Statistics of the samples taken in it, per ``(source, metric)``, with its
            buffer counts and totals (energy).
        wait_percent: Share of its wall time the loop waited for its next batch, where that
            is measured (:mod:`tfthroughput.monitor.input_wait`).
    """

    index: int
    epoch: int
    step: int
    steps: int
    seconds: float
    stats: WindowStats
    wait_percent: float | None = None

    @property
    def steps_per_second(self) -> float | None:
        return self.steps / self.seconds if self.seconds > 0 else None

    def without_samples(self) -> Window:
        """The same window with only the statistics, to be kept for long at little cost."""
        slim = WindowStats(
            {key: replace(stats, samples=()) for key, stats in self.stats.items()},
            start=self.stats.start,
            end=self.stats.end,
            buffer_samples=self.stats.buffer_samples,
            totals=self.stats.totals,
        )
        return replace(self, stats=slim)


class EpochWindows:
    """The windows of the epoch in progress. Not thread-safe: the monitor holds its lock.

    Args:
        epoch: The epoch.
        start: When it began, on the monitor's clock.
        first_step: Optimizer steps completed when it began.
        first_index: The index its first window gets.
        wait: The run's wait for batches, begun with the epoch: each window gets its share.
    """

    def __init__(
        self,
        epoch: int,
        start: float,
        first_step: int,
        first_index: int,
        wait: PhaseWait | None = None,
    ) -> None:
        self.wait = PhaseWait(None) if wait is None else wait
        self.epoch = epoch
        self.start = start
        self.first_step = first_step
        self.window_start = start
        self.window_first_step = first_step
        self.next_index = first_index
        self._parts: list[WindowStats] = []

    def cut(self, stats: WindowStats, now: float, step: int) -> Window | None:
        """End the open window at ``now``, after ``step`` steps, and open the next one.

        Args:
            stats: What the sampler collected since the previous cut.
            now: The monitor's clock.
            step: Optimizer steps completed now.

        Returns:
            The window, or None if no step was taken in it (the time after an epoch's last
            step, when the previous window ended right there): its samples still count in
            :meth:`epoch_stats`.
        """
        self._parts.append(stats)
        steps = step - self.window_first_step
        wait = self.wait.window(now - self.window_start)  # the next window's wait begins
        if steps <= 0:
            return None
        window = Window(
            index=self.next_index,
            epoch=self.epoch,
            step=step,
            steps=steps,
            seconds=now - self.window_start,
            stats=stats,
            wait_percent=wait,
        )
        self.window_start, self.window_first_step = now, step
        self.next_index += 1
        return window

    def end(
        self, step: int, update: UpdateFrequency, now: float, written_through: int | None
    ) -> int | None:
        """The step the open window ends at, once ``step`` steps are done at ``now``; None if
        not due.

        By steps: the last multiple of ``update.batches`` (from the window's start) that
        ``step`` reached. By time: ``step`` itself, once the window's time is up. Never at or
        below ``written_through``, a step written before a resume.
        """
        first = self.window_first_step
        if update.batches is not None:
            end = first + (step - first) // update.batches * update.batches
        elif update.seconds is not None and now - self.window_start >= update.seconds:
            end = step
        else:
            return None
        if end <= first or (written_through is not None and end <= written_through):
            return None
        return end

    def epoch_stats(self) -> WindowStats:
        """The epoch as one window: every sample of its windows together, totals added up."""
        if len(self._parts) == 1:
            return self._parts[0]
        return merge_windows(self._parts)
