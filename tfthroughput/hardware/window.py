"""The sampler's sample storage: the open window of readings, cut into statistics on demand.

Point readings belong to the window that is open when they are stored. Samples the hardware
took itself (:class:`~tfthroughput.hardware.source.TimedSamples`, e.g. NVML's sample buffers)
belong to the window their own time falls in: one taken before the open window began belongs to
a window already summarised and is dropped, so a boundary between windows (an epoch's end)
splits the hardware's samples by when they were taken, not by when they were read.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import NamedTuple

from tfthroughput.hardware.source import Reading, TimedSamples
from tfthroughput.hardware.stats import MetricStats, summarize


class SampleKey(NamedTuple):
    """Which series a sample belongs to: the source's name and the metric's name.

    Kept as a pair all the way to the writer, which alone joins it into a tag.
    """

    source: str
    metric: str


class WindowStats(dict):
    """One window's :class:`~tfthroughput.hardware.stats.MetricStats` per :class:`SampleKey`.

    A plain ``dict`` of the statistics, with what is not a statistic of readings alongside.

    Attributes:
        start: When the window began, on the sampler's clock (seconds).
        end: When it was cut, on the same clock.
        buffer_samples: For each metric read from a hardware sample buffer, how many of the
            buffer's samples fall in this window; 0 when none did and its statistics come from
            point readings instead.
    """

    def __init__(
        self,
        stats: Mapping[SampleKey, MetricStats],
        *,
        start: float,
        end: float,
        buffer_samples: Mapping[SampleKey, int],
    ) -> None:
        super().__init__(stats)
        self.start = start
        self.end = end
        self.buffer_samples = dict(buffer_samples)


def check_reading(reading: object) -> Reading:
    """A source's reading as the store keeps it: ``TimedSamples`` or a float.

    Raises:
        TypeError, ValueError: If it is neither a number nor ``TimedSamples``.
    """
    if isinstance(reading, TimedSamples):
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

    def add(self, key: SampleKey, reading: Reading, now: float) -> None:
        """Store one reading (checked by :func:`check_reading`) read at ``now``."""
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
        window = WindowStats(stats, start=self.start, end=now, buffer_samples=self._buffer_counts)
        self._values, self._fallbacks, self._buffer_counts = {}, {}, {}
        self.start = now
        return window
