"""NVML's sample buffers: every sample the driver took, whatever the polling rate.

The driver samples GPU-Util and memory-controller utilization on its own schedule (every
~200 ms on an H200; it differs by GPU) and power too, into bounded buffers of timestamped
samples. The point queries (``nvmlDeviceGetUtilizationRates``, ``nvmlDeviceGetPowerUsage``)
return only the latest of them, so polling once a second sees a fifth of the GPU-Util samples
and, when the training loop's rhythm locks to the polling (a 1 s step, a stall every N steps),
can report a busy GPU as idle. Asking the buffer for the samples newer than the last one seen
returns all of them.

Where the buffer is not supported the point query is used instead, quietly; where it has no new
sample (NVML answers "not found"; some drivers stop filling it while the GPU idles), a point
reading is taken as a fallback for a window that would otherwise have no value.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from tfthroughput.hardware.source import Reading, TimedSamples

# NVML's value types (nvmlValueType_t) -> the member of nvmlValue_t holding the value.
_VALUE_FIELDS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}

# How far in the future a just-read timestamp may lie on its own clock (clock reads are not
# simultaneous); anything later means it is not on that clock.
_CLOCK_SLACK_SECONDS = 1.0


def _candidate_clocks() -> list[Callable[[], float]]:
    clocks = [time.time, time.monotonic]
    if hasattr(time, "CLOCK_BOOTTIME"):  # Linux
        clocks.append(lambda: time.clock_gettime(time.CLOCK_BOOTTIME))
    return clocks


def identify_clock(
    newest_seconds: float, candidates: list[Callable[[], float]] | None = None
) -> Callable[[], float]:
    """The clock on which a sample just read from a buffer was taken.

    NVML documents the timestamps as "CPU timestamp in microseconds" without naming the clock:
    the wall clock on some drivers, the time since boot on others. The newest sample was
    taken in the recent past, so its clock is the one on which it is closest before now; the
    wall clock (about 1.7e9 s) and the time since boot (the uptime) are far apart, so the
    choice is clear. If it lies in the future on every clock, the newest sample is taken as
    "now" and its clock is followed with the monotonic clock from there.

    Args:
        newest_seconds: The newest timestamp read, in seconds.
        candidates: Clocks to choose from; defaults to wall, monotonic and (on Linux) boot time.

    Returns:
        A zero-argument callable giving "now" on the samples' clock, in seconds.
    """
    best, best_age = None, float("inf")
    for clock in candidates or _candidate_clocks():
        age = clock() - newest_seconds
        if -_CLOCK_SLACK_SECONDS <= age < best_age:
            best, best_age = clock, age
    if best is not None:
        return best
    anchor = time.monotonic()
    return lambda: newest_seconds + (time.monotonic() - anchor)


class SampleBuffer:
    """One of a GPU's NVML sample buffers, read from where the previous read stopped.

    Args:
        pynvml: The initialised ``pynvml`` module.
        handle: The device's NVML handle.
        sampling_type: ``NVML_GPU_UTILIZATION_SAMPLES``, ``NVML_MEMORY_UTILIZATION_SAMPLES``
            or ``NVML_TOTAL_POWER_SAMPLES``.
        scale: Factor from NVML's unit to the metric's (``0.001`` for milliwatts to watts).
    """

    def __init__(self, pynvml, handle, sampling_type: int, scale: float = 1.0) -> None:
        self._nvml = pynvml
        self._handle = handle
        self._type = sampling_type
        self._scale = scale
        # 0 asks for the whole buffer; what predates the sampler's window is dropped there.
        self._last_seen_us = 0
        self._driver_clock: Callable[[], float] | None = None
        self.supported = True

    def read(self) -> list[tuple[float, float]] | None:
        """The samples taken since the previous read, oldest first.

        Returns:
            ``(age_seconds, value)`` pairs; ``[]`` when there is no new sample; ``None`` when
            this GPU has no such buffer (and from then on, without asking NVML again).

        Raises:
            pynvml.NVMLError: Any other NVML error (e.g. "GPU is lost").
        """
        if not self.supported:
            return None
        nvml = self._nvml
        try:
            value_type, samples = nvml.nvmlDeviceGetSamples(
                self._handle, self._type, self._last_seen_us
            )
        except nvml.NVMLError as error:
            code = getattr(error, "value", None)
            if code == nvml.NVML_ERROR_NOT_FOUND:
                return []
            if code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                self.supported = False
                return None
            raise
        field = _VALUE_FIELDS.get(value_type, "uiVal")
        # Unfilled entries come back with timestamp 0: only what is newer than seen counts.
        fresh = sorted(
            (sample.timeStamp, getattr(sample.sampleValue, field))
            for sample in samples
            if sample.timeStamp > self._last_seen_us
        )
        if not fresh:
            return []
        self._last_seen_us = fresh[-1][0]
        if self._driver_clock is None:
            self._driver_clock = identify_clock(fresh[-1][0] / 1e6)
        now = self._driver_clock()
        return [(now - stamp / 1e6, float(value) * self._scale) for stamp, value in fresh]


class BufferedQuery:
    """Metrics NVML offers both as a sample buffer and as a point query.

    Each metric comes from its buffer while the buffer is supported; when it has no new
    sample, a point reading rides along as the window's fallback; where there is no buffer,
    the point reading is the value.

    Args:
        pynvml: The initialised ``pynvml`` module.
        point: The point query: ``handle -> {metric: value}`` for every metric in ``buffers``.
        buffers: One :class:`SampleBuffer` per metric.
    """

    def __init__(
        self,
        pynvml,
        point: Callable[[object], dict[str, float]],
        buffers: Mapping[str, SampleBuffer],
    ) -> None:
        self._nvml = pynvml
        self._point = point
        self._buffers = dict(buffers)

    def __call__(self, handle) -> dict[str, Reading]:
        readings: dict[str, Reading] = {}
        unbuffered, empty = [], []
        for metric, buffer in self._buffers.items():
            samples = buffer.read()
            if samples is None:
                unbuffered.append(metric)
            elif samples:
                readings[metric] = TimedSamples(tuple(samples))
            else:
                empty.append(metric)
        point: dict[str, float] = {}
        if unbuffered:
            point = self._point(handle)  # the value itself: its errors are the query's
            readings.update((metric, point[metric]) for metric in unbuffered)
        elif empty:
            try:
                point = self._point(handle)
            except self._nvml.NVMLError as error:
                if getattr(error, "value", None) == self._nvml.NVML_ERROR_GPU_IS_LOST:
                    raise
                # Only a fallback: the window keeps whatever the buffer gave it.
        for metric in empty:
            readings[metric] = TimedSamples((), fallback=point.get(metric))
        return readings
