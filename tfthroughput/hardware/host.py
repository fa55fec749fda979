"""Host CPU and RAM through ``psutil``."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Collection
from typing import NamedTuple

from tfthroughput.hardware.metrics import HOST_METRICS

_GIB = 1024.0**3

# Shortest span a CPU percentage is computed over. The kernel counts CPU time in clock ticks
# (10 ms on Linux), so over a span of t seconds a percentage is only good to +-1 tick / t: over
# 0.2 ms right after the previous reading, one tick reads as 5,000 % of a core, no tick as 0 %.
# psutil recommends at least 0.1 s between its non-blocking calls for the same reason.
MIN_CPU_SPAN_SECONDS = 0.1

_CPU_METRICS = frozenset({"cpu_percent", "process_cpu_percent"})


class _CPUReading(NamedTuple):
    """Cumulative counters at one moment, the start of the next CPU percentage's span."""

    wall: float  # seconds, on the source's clock
    process: float  # CPU seconds (user + system) used by the process
    system: dict[str, float]  # psutil.cpu_times() of the whole machine, all cores


class HostSource:
    """Host CPU and RAM through ``psutil``: system CPU %, this process's CPU % and RSS, RAM %.

    CPU percentages are averages over the span since the previous reading **on the same
    thread** (or since the source was created), so a reading on the training thread never
    shortens the span of the sampler thread's next one: each thread keeps its own starting
    point. A span shorter than ``MIN_CPU_SPAN_SECONDS`` (0.1 s) would be dominated by the
    kernel's 10 ms tick (a false 0 % or thousands of %): such a reading (the end of a window a
    few steps long) instead gives the percentage over the trailing span that ends now and starts
    at the latest earlier reading, on any thread, at least 0.1 s old; the thread's own span
    continues into its next reading. Only within 0.1 s of the source's creation is there no CPU
    reading at all.

    Args:
        metrics: Metric names to report; ``None`` reports all host metrics.
        process: The ``psutil.Process`` to watch. Defaults to the current process.
        clock: Monotonic seconds. Defaults to ``time.monotonic``.

    Example:
        >>> source = HostSource(["cpu_percent", "ram_used_percent"])
        >>> sorted(source.read())  # too soon for a CPU percentage
        ['ram_used_percent']
        >>> time.sleep(MIN_CPU_SPAN_SECONDS)
        >>> sorted(source.read())
        ['cpu_percent', 'ram_used_percent']
    """

    name = "host"

    def __init__(
        self,
        metrics: Collection[str] | None = None,
        process=None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import psutil

        self._psutil = psutil
        self._process = process if process is not None else psutil.Process()
        self._clock = clock
        known = {metric.name for metric in HOST_METRICS}
        self._metrics = known if metrics is None else known & set(metrics)
        self._created = self._cpu_reading() if self._metrics & _CPU_METRICS else None
        self._per_thread = threading.local()
        # Readings of every thread, at least half the minimum span apart, oldest first: where
        # a short span finds the start of a trailing one.
        self._history: collections.deque[_CPUReading] = collections.deque(
            [self._created] if self._created is not None else [], maxlen=8
        )
        self._history_lock = threading.Lock()

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        if self._created is not None:
            values.update(self._cpu_percentages())
        if "process_rss_gib" in self._metrics:
            values["process_rss_gib"] = self._process.memory_info().rss / _GIB
        if "ram_used_percent" in self._metrics:
            values["ram_used_percent"] = float(self._psutil.virtual_memory().percent)
        return values

    def close(self) -> None:
        pass

    def _cpu_percentages(self) -> dict[str, float]:
        start: _CPUReading = getattr(self._per_thread, "start", self._created)
        now = self._cpu_reading()
        if now.wall - start.wall >= MIN_CPU_SPAN_SECONDS:
            self._per_thread.start = now
        else:  # keep `start`: the thread's span goes on; this reading gets a trailing one
            start = self._trailing_start(now.wall)
            if start is None:
                return {}
        self._remember(now)
        span = now.wall - start.wall
        values = {}
        if "cpu_percent" in self._metrics:
            values["cpu_percent"] = _busy_percent(start.system, now.system)
        if "process_cpu_percent" in self._metrics:
            values["process_cpu_percent"] = 100.0 * (now.process - start.process) / span
        return values

    def _trailing_start(self, now: float) -> _CPUReading | None:
        """The latest reading at least ``MIN_CPU_SPAN_SECONDS`` before ``now``, if any."""
        with self._history_lock:
            return next(
                (r for r in reversed(self._history) if now - r.wall >= MIN_CPU_SPAN_SECONDS), None
            )

    def _remember(self, reading: _CPUReading) -> None:
        with self._history_lock:
            if reading.wall - self._history[-1].wall >= MIN_CPU_SPAN_SECONDS / 2:
                self._history.append(reading)

    def _cpu_reading(self) -> _CPUReading:
        process = self._process.cpu_times()
        return _CPUReading(
            wall=self._clock(),
            process=process.user + process.system,
            system=self._psutil.cpu_times()._asdict(),
        )


def _busy_percent(start: dict[str, float], end: dict[str, float]) -> float:
    """Share of all cores' time spent busy between two ``psutil.cpu_times()``, as psutil counts.

    Each field's change is clamped at 0 (Linux's iowait counter can step back); guest time is
    already inside user and nice on Linux, and iowait is idle time.
    """
    spent = {field: max(0.0, end[field] - start[field]) for field in end}
    total = sum(spent.values()) - spent.get("guest", 0.0) - spent.get("guest_nice", 0.0)
    idle = spent.get("idle", 0.0) + spent.get("iowait", 0.0)
    return 100.0 * (total - idle) / total if total > 0 else 0.0
