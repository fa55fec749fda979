"""``DipTrigger``: when to capture a profile, decided from a monitor's windows.

A profile taken at a fixed step shows a healthy stretch as often as not; the moment worth a
trace is when the accelerator starves. :class:`DipTrigger` reads the windows a
:class:`~tfthroughput.GPUMonitor` writes and says when several in a row were low, so that
:class:`~tfthroughput.ProfileSteps` can trace the next steps. It only reads: the monitor knows
nothing of it, and capturing stays in ``ProfileSteps``.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable

from tfthroughput._validation import check_positive_int, parse_duration
from tfthroughput.monitor.epoch_windows import Window


class DipTrigger:
    """Says when the windowed GPU utilization (or throughput) has stayed low for a while.

    A window is *low* when the mean GPU utilization of its samples (averaged over the GPUs) is
    below ``threshold_percent``; in a run with no GPU sampled, when its steps/s is below
    ``threshold_percent`` percent of the best window's so far. ``windows`` low windows in a row
    make a dip. A dip fires at most once per ``cooldown``: a dip that lasts through the
    cooldown fires again, a new one after it fires anew. Windows of the ``fit``'s first
    ``warmup_epochs`` epochs never count (tracing, compilation and caches filling make them
    slow on purpose), nor do they set the best steps/s.

    Give it to ``ProfileSteps(on_dip=...)``, which polls it before each training step and
    captures ``steps`` steps when it fires. The monitor must cut windows (``update_freq``);
    with ``update_freq="epoch"`` each epoch is one window. The last window of an epoch lasts
    until the epoch's end, validation included, so its steps/s is lower when there is
    validation: the GPU measure is not affected.

    Args:
        monitor: The ``GPUMonitor`` whose windows it reads (listed in the same ``fit``).
        threshold_percent: Below this a window is low, in percent (0-100). Defaults to 30.
        windows: Low windows in a row that make a dip. Defaults to 3.
        steps: Training steps to capture when it fires. Defaults to 10.
        cooldown: Least time between two firings, a duration with its unit (``"10min"``,
            ``"1h"``, ``"30s"``). Defaults to ``"10min"``.
        warmup_epochs: First epochs of each ``fit`` whose windows are ignored. Defaults to 1.
        clock: Monotonic seconds, for the cooldown. Defaults to ``time.monotonic``.

    Raises:
        TypeError, ValueError: For invalid arguments, naming the argument and value.

    Example:
        >>> from tfthroughput import DipTrigger, GPUMonitor, ProfileSteps
        >>> monitor = GPUMonitor("logs/run1", update_freq="30s")
        >>> dip = DipTrigger(monitor, threshold_percent=30, windows=3, steps=10)
        >>> callbacks = [monitor, ProfileSteps("logs/run1", on_dip=dip)]
    """

    def __init__(
        self,
        monitor,
        *,
        threshold_percent: float = 30.0,
        windows: int = 3,
        steps: int = 10,
        cooldown: str = "10min",
        warmup_epochs: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not callable(getattr(monitor, "windows_since", None)):
            raise TypeError(f"`monitor` must be a GPUMonitor. Received: monitor={monitor!r}")
        if isinstance(threshold_percent, bool) or not isinstance(threshold_percent, numbers.Real):
            raise TypeError(
                "`threshold_percent` must be a number between 0 and 100. "
                f"Received: threshold_percent={threshold_percent!r}"
            )
        if not 0 < threshold_percent <= 100:
            raise ValueError(
                "`threshold_percent` must be a number between 0 and 100. "
                f"Received: threshold_percent={threshold_percent!r}"
            )
        check_positive_int("windows", windows)
        check_positive_int("steps", steps)
        if isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, numbers.Integral):
            raise TypeError(
                f"`warmup_epochs` must be an int >= 0. Received: warmup_epochs={warmup_epochs!r}"
            )
        if warmup_epochs < 0:
            raise ValueError(
                f"`warmup_epochs` must be an int >= 0. Received: warmup_epochs={warmup_epochs!r}"
            )
        self.monitor = monitor
        self.threshold_percent = float(threshold_percent)
        self.windows = int(windows)
        self.steps = int(steps)
        self.cooldown = cooldown
        self.cooldown_seconds = parse_duration("cooldown", cooldown)
        self.warmup_epochs = int(warmup_epochs)
        self._clock = clock
        self._last_fired: float | None = None
        self.begin_fit()

    def begin_fit(self) -> None:
        """Forget the windows of an earlier ``fit`` (the cooldown carries over)."""
        self._seen = 0
        self._first_epoch: int | None = None
        self._low: list[tuple[Window, float]] = []
        self._best_steps_per_second = 0.0

    def begin_epoch(self, epoch: int) -> None:
        if self._first_epoch is None:
            self._first_epoch = epoch

    def poll(self) -> str | None:
        """Read the windows ended since the last call; if a dip fires, say why.

        Cheap when no window has ended: one integer compared.

        Returns:
            The reason, e.g. ``"GPU utilization was below 30 % for 3 windows in a row (steps
            41 to 70: 12 %, 9 %, 11 %)"``, or None.
        """
        count = self.monitor.window_count
        if count == self._seen:
            return None
        new = self.monitor.windows_since(self._seen)
        self._seen = count
        for window in new:
            self._observe(window)
        if len(self._low) < self.windows:
            return None
        now = self._clock()
        if self._last_fired is not None and now - self._last_fired < self.cooldown_seconds:
            return None
        self._last_fired = now
        low, self._low = self._low[-self.windows :], []
        return self._reason(low)

    def _observe(self, window: Window) -> None:
        if self._first_epoch is None or window.epoch < self._first_epoch + self.warmup_epochs:
            return
        percent = self._percent(window)
        if percent is None:
            return
        if percent < self.threshold_percent:
            self._low.append((window, percent))
        else:
            self._low = []

    def _percent(self, window: Window) -> float | None:
        gpu = _gpu_utilization(window)
        if gpu is not None:
            return gpu
        steps_per_second = window.steps_per_second
        if steps_per_second is None:
            return None
        self._best_steps_per_second = max(self._best_steps_per_second, steps_per_second)
        return 100.0 * steps_per_second / self._best_steps_per_second

    def _reason(self, low: list[tuple[Window, float]]) -> str:
        first, last = low[0][0], low[-1][0]
        measure = (
            "GPU utilization"
            if _gpu_utilization(first) is not None
            else "steps/s (in percent of the run's best window)"
        )
        values = ", ".join(f"{percent:.0f} %" for _, percent in low)
        return (
            f"{measure} was below {self.threshold_percent:g} % for {len(low)} windows in a row "
            f"(steps {first.step - first.steps + 1} to {last.step}: {values})"
        )


def _gpu_utilization(window: Window) -> float | None:
    """The window's GPU utilization, averaged over its GPUs, or None without a GPU."""
    means = [
        stats.mean
        for key, stats in window.stats.items()
        if key.source.startswith("gpu") and key.metric == "utilization_percent"
    ]
    return sum(means) / len(means) if means else None
