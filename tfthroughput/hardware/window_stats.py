"""The sampler's sample storage: the open window of readings, cut into statistics on demand.

Point readings belong to the window that is open when they are stored. Samples the hardware
took itself (:class:`~tfthroughput.hardware.source.TimedSamples`, e.g. NVML's sample buffers)
belong to the window their own time falls in: one taken before the open window began belongs to
a window already summarised and is dropped, so a boundary between windows (an epoch's end)
splits the hardware's samples by when they were taken, not by when they were read.

An :class:`~tfthroughput.hardware.source.Increment` (energy since the previous read) is not
summarised but added up: a window reports the sum of the increments over it, an increment whose
span straddles the window's start counting in proportion to the part inside.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from tfthroughput.hardware.source import Increment, Reading, TimedSamples
from tfthroughput.hardware.stats import MetricStats, merge, summarize


class SampleKey(NamedTuple):
    """Which series a sample belongs to: the source's name and the metric's name.

    Kept as a pair all the way to the writer, which alone joins it into a tag.
    """

    source: str
    metric: str


class WindowTotal(NamedTuple):
    """What accumulated over one window (the sum of its increments).

    Attributes:
        amount: E.g. joules used in the window.
        counter: Whether the last increment came from a hardware counter (True) or the
            source's own estimate (False).
    """

    amount: float
    counter: bool


class WindowStats(dict):
    """One window's :class:`~tfthroughput.hardware.stats.MetricStats` per :class:`SampleKey`.

    A plain ``dict`` of the statistics, with what is not a statistic of readings alongside.

    Attributes:
        start: When the window began, on the sampler's clock (seconds).
        end: When it was cut, on the same clock.
        buffer_samples: For each metric read from a hardware sample buffer, how many of the
            buffer's samples fall in this window; 0 when none did and its statistics come from
            point readings instead.
        totals: What each accumulating metric (energy) added up to over the window.
    """

    def __init__(
        self,
        stats: Mapping[SampleKey, MetricStats],
        *,
        start: float,
        end: float,
        buffer_samples: Mapping[SampleKey, int],
        totals: Mapping[SampleKey, WindowTotal] | None = None,
    ) -> None:
        super().__init__(stats)
        self.start = start
        self.end = end
        self.buffer_samples = dict(buffer_samples)
        self.totals = dict(totals or {})

    def only(self, keep: Callable[[SampleKey], bool]) -> WindowStats:
        """The same window restricted to the keys ``keep`` accepts."""
        return WindowStats(
            {key: value for key, value in self.items() if keep(key)},
            start=self.start,
            end=self.end,
            buffer_samples={k: v for k, v in self.buffer_samples.items() if keep(k)},
            totals={k: v for k, v in self.totals.items() if keep(k)},
        )


def merge_windows(windows: Sequence[WindowStats]) -> WindowStats:
    """Consecutive windows as one: what a single cut over their whole span would have given.

    Statistics are those of all the samples together (exact, see
    :func:`~tfthroughput.hardware.stats.merge`). A metric read from a hardware sample buffer
    keeps to its buffer's samples wherever any window had some, as one window does, and falls
    back to the point readings only if none had; buffer counts and totals add up (a total's
    ``counter`` is the last window's).

    Raises:
        ValueError: If ``windows`` is empty.

    Example:
        >>> key = SampleKey("gpu0", "utilization_percent")
        >>> first = WindowStats({key: summarize([10.0])}, start=0.0, end=1.0, buffer_samples={})
        >>> second = WindowStats({key: summarize([30.0])}, start=1.0, end=2.0, buffer_samples={})
        >>> merge_windows([first, second])[key].mean
        20.0
    """
    if not windows:
        raise ValueError("`windows` must not be empty. Received: windows=[]")
    buffer_samples: dict[SampleKey, int] = {}
    totals: dict[SampleKey, WindowTotal] = {}
    for window in windows:
        for key, count in window.buffer_samples.items():
            buffer_samples[key] = buffer_samples.get(key, 0) + count
        for key, total in window.totals.items():
            amount = totals[key].amount if key in totals else 0.0
            totals[key] = WindowTotal(amount + total.amount, total.counter)
    parts: dict[SampleKey, list[MetricStats]] = {}
    for window in windows:
        for key, stats in window.items():
            from_buffer = window.buffer_samples.get(key, 0) > 0
            if buffer_samples.get(key, 0) > 0 and not from_buffer:
                continue  # point readings stand in only where no window had buffer samples
            parts.setdefault(key, []).append(stats)
    return WindowStats(
        {key: merge(stats) for key, stats in sorted(parts.items())},
        start=windows[0].start,
        end=windows[-1].end,
        buffer_samples=buffer_samples,
        totals=dict(sorted(totals.items())),
    )


def check_reading(reading: object) -> Reading:
    """A source's reading as the store keeps it: ``TimedSamples``, ``Increment`` or a float.

    Raises:
        TypeError, ValueError: If it is none of them and not a number.
    """
    if isinstance(reading, (TimedSamples, Increment)):
        return reading
    return float(reading)  # type: ignore[arg-type]


class SampleStore:
    """The samples of the open window; not thread-safe (the sampler holds its lock).

    Args:
        start: When the first window begins, on the sampler's clock.
    """

    def __init__(self, start: float) -> None:
        self.start = start
        self._values: dict[SampleKey, array] = {}
        self._fallbacks: dict[SampleKey, array] = {}
        self._buffer_counts: dict[SampleKey, int] = {}
        self._totals: dict[SampleKey, WindowTotal] = {}

    def add(self, key: SampleKey, reading: Reading, now: float) -> None:
        """Store one reading (checked by :func:`check_reading`) read at ``now``."""
        if isinstance(reading, Increment):
            end = now - reading.age
            if end < self.start:
                return  # accumulated before the window began: the closed window's
            inside = end - self.start
            share = 1.0 if reading.seconds <= inside else inside / reading.seconds
            total = self._totals.get(key, WindowTotal(0.0, reading.counter))
            self._totals[key] = WindowTotal(total.amount + share * reading.amount, reading.counter)
            return
        values = self._values.setdefault(key, array("d"))
        if not isinstance(reading, TimedSamples):
            values.append(reading)
            return
        count = self._buffer_counts.get(key, 0)
        for age, value in reading.samples:
            if now - age >= self.start:
                values.append(value)
                count += 1
        self._buffer_counts[key] = count
        if reading.fallback is not None:
            self._fallbacks.setdefault(key, array("d")).append(reading.fallback)

    def cut(self, now: float) -> WindowStats:
        """Summarise the open window, which ends at ``now``, and open the next one."""
        values, fallbacks = self._values, self._fallbacks
        stats = {}
        for key in sorted(values.keys() | fallbacks.keys()):
            samples = values.get(key) or fallbacks.get(key)
            if samples:
                stats[key] = summarize(samples)
        window = WindowStats(
            stats,
            start=self.start,
            end=now,
            buffer_samples=self._buffer_counts,
            totals=dict(sorted(self._totals.items())),
        )
        self._values, self._fallbacks, self._buffer_counts, self._totals = {}, {}, {}, {}
        self.start = now
        return window
