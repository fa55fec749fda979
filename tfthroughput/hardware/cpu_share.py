"""How many cores this process used over a stretch of time, and how many other programs took.

A parallel ``tf.data`` stage can only use the cores the kernel gives the process. Linux shares
the cores between programs (each session's processes as one group), not between threads: while
another program keeps one of two cores busy, a pipeline with ``parallelism=2`` runs on about one
core, whatever tf.data's autotuner set (``benchmarks/pipeline_cpu_map.py --hog 1``). What the
process got and what the others took, read from the kernel's CPU counters before and after, is
what tells this case apart from a pipeline that does not parallelise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

# Other programs' cores from which a measurement counts as disturbed: half a core taken is
# a quarter of a 2-core machine, and a parallel stage's share shrinks with it.
CONTENDED_CORES = 0.5


def schedulable_cores() -> int:
    """CPU cores this process may run on (its CPU affinity; the machine's cores where the
    platform has none, as on macOS)."""
    try:
        return len(psutil.Process().cpu_affinity())
    except (AttributeError, psutil.Error):
        return psutil.cpu_count() or 1


def machine_busy_seconds() -> float:
    """CPU seconds every process of the machine has spent, all cores together (idle and
    waiting on I/O left out; ``guest`` time is already inside ``user``)."""
    times = psutil.cpu_times()
    return sum(
        getattr(times, field, 0.0)
        for field in ("user", "nice", "system", "irq", "softirq", "steal")
    )


def wall_seconds() -> float:
    """The wall clock a :class:`CpuShareMeter` reads by default (``time.perf_counter``)."""
    return time.perf_counter()


def own_cpu_seconds() -> float:
    """CPU seconds of this process and of its child processes still running (a ``PyDataset``'s
    worker processes are the user's own work, not another program)."""
    process = psutil.Process()
    total = sum(process.cpu_times()[:2])
    for child in process.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # ended meanwhile
            continue
    return total


@dataclass(frozen=True)
class CpuShare:
    """The cores used over ``seconds`` of wall time.

    Attributes:
        seconds: Wall time measured.
        cores: Cores this process may run on.
        own_cores: CPU seconds of this process (and its running child processes) per wall
            second: ``1.93`` is about two cores kept busy.
        other_cores: The same for every other process of the machine, or ``None`` where the
            machine has cores this process may not run on (a container pinned to a few of the
            host's cores: what runs on the others takes nothing from it).
    """

    seconds: float
    cores: int
    own_cores: float
    other_cores: float | None

    @property
    def contended(self) -> bool:
        """Whether other programs took at least ``CONTENDED_CORES`` of the process's cores."""
        return self.other_cores is not None and self.other_cores >= CONTENDED_CORES

    def describe(self) -> str:
        """E.g. ``"this process used 1.00 of the 2 cores; other programs took 0.98"``."""
        text = f"this process used {self.own_cores:.2f} of the {self.cores} cores"
        if self.other_cores is not None:
            text += f"; other programs took {self.other_cores:.2f}"
        return text


class CpuShareMeter:
    """Measures the :class:`CpuShare` of what runs between :meth:`start` and :meth:`stop`.

    Several stretches add up: each ``start``/``stop`` pair adds its time and CPU seconds, so
    the repeats of one measurement give one share.

    Args:
        read_machine: CPU seconds of the whole machine. Defaults to
            :func:`machine_busy_seconds`, looked up when read (the suite puts a fake counter
            there, as it puts a fake NVML library where the GPU would be).
        read_own: CPU seconds of this process. Defaults to :func:`own_cpu_seconds`, likewise.
        clock: Wall clock in seconds. Defaults to :func:`wall_seconds`, looked up when read
            (the suite's fake counters answer for the instant it was read).
        cores: Cores this process may run on (:func:`schedulable_cores`).
        machine_cores: Cores of the machine (``psutil.cpu_count()``).
    """

    def __init__(
        self,
        *,
        read_machine: Callable[[], float] | None = None,
        read_own: Callable[[], float] | None = None,
        clock: Callable[[], float] | None = None,
        cores: int | None = None,
        machine_cores: int | None = None,
    ) -> None:
        self._read_machine = read_machine or (lambda: machine_busy_seconds())
        self._read_own = read_own or (lambda: own_cpu_seconds())
        self._clock = clock or (lambda: wall_seconds())
        self.cores = cores if cores is not None else schedulable_cores()
        self._machine_cores = (
            machine_cores if machine_cores is not None else (psutil.cpu_count() or self.cores)
        )
        self._seconds = self._own = self._machine = 0.0
        self._started: tuple[float, float, float] | None = None

    def start(self) -> None:
        self._started = (self._clock(), self._read_own(), self._read_machine())

    def stop(self) -> None:
        if self._started is None:
            raise RuntimeError("CpuShareMeter.stop() without start()")
        wall, own, machine = self._started
        self._seconds += self._clock() - wall
        self._own += self._read_own() - own
        self._machine += self._read_machine() - machine
        self._started = None

    def share(self) -> CpuShare | None:
        """The share over every stretch measured so far; ``None`` before the first."""
        if self._seconds <= 0:
            return None
        others = None
        if self._machine_cores <= self.cores:
            others = max(0.0, self._machine - self._own) / self._seconds
        return CpuShare(self._seconds, self.cores, self._own / self._seconds, others)
