"""A GPU's energy, read by read: NVML's energy counter, or sampled power integrated.

NVML's ``nvmlDeviceGetTotalEnergyConsumption`` (Volta and newer) counts millijoules since the
driver was loaded. The meter turns consecutive readings into the energy used between them, across
a counter that restarts (a driver reload) or wraps; the sampler adds those increments up per
window. On boards without the counter the meter integrates the power samples instead
(trapezoids between consecutive samples, at the samples' own times) and says so:
``Increment.counter`` is False.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from tfthroughput.hardware.source import Increment, Reading

_COUNTER_MODULUS = 2**64  # nvmlDeviceGetTotalEnergyConsumption fills an unsigned long long


class EnergyMeter:
    """Energy used by one GPU between consecutive readings, in joules.

    The first reading of either kind only sets the starting point; take it when the source
    starts, so the first window is covered from its beginning.

    Args:
        clock: Monotonic seconds, to time the spans. Defaults to ``time.monotonic``.

    Example:
        >>> meter = EnergyMeter()
        >>> meter.from_counter(1_000_000).amount, meter.from_counter(1_250_000).amount
        (0.0, 250.0)
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._counter: tuple[float, int] | None = None  # (time, millijoules) last read
        self._power: tuple[float, float] | None = None  # (time, watts) last integrated

    def from_counter(self, millijoules: int) -> Increment:
        """The energy since the previous counter reading (0 J for the first)."""
        now = self._clock()
        previous, self._counter = self._counter, (now, millijoules)
        if previous is None:
            return Increment(0.0, 0.0, counter=True)
        then, previous_mj = previous
        delta = millijoules - previous_mj
        if delta < 0:
            # Back down: wrapped past 2**64 (only from near the top) or restarted from 0 with a
            # driver reload, in which case what it counted since is all that is known.
            delta = (
                millijoules + _COUNTER_MODULUS - previous_mj
                if previous_mj >= 2**63
                else millijoules
            )
        return Increment(delta / 1000.0, now - then, counter=True)

    def from_power(self, samples: Iterable[tuple[float, float]]) -> Increment | None:
        """The energy between the last power sample integrated and the newest of ``samples``.

        Args:
            samples: ``(age_seconds, watts)`` pairs, ages counted back from now; samples no
                newer than the last one integrated are skipped.

        Returns:
            The increment, ending at the newest sample; None before any sample.
        """
        now = self._clock()
        joules, span_start = 0.0, None
        for age, watts in sorted(samples, key=lambda sample: -sample[0]):
            moment = now - age
            if self._power is not None:
                last_moment, last_watts = self._power
                if moment <= last_moment:
                    continue
                joules += (moment - last_moment) * (watts + last_watts) / 2.0
                span_start = last_moment if span_start is None else span_start
            self._power = (moment, watts)
        if self._power is None:
            return None
        end = self._power[0]
        seconds = 0.0 if span_start is None else end - span_start
        return Increment(joules, seconds, counter=False, age=now - end)


class EnergyQuery:
    """``energy_joules`` of one GPU: the counter while NVML has it, then integrated power.

    Args:
        pynvml: The initialised ``pynvml`` module.
        power_samples: ``handle -> [(age_seconds, watts), ...]``: this read's power samples.
        meter: The meter; defaults to a new :class:`EnergyMeter`.
    """

    def __init__(
        self,
        pynvml,
        power_samples: Callable[[object], list[tuple[float, float]]],
        meter: EnergyMeter | None = None,
    ) -> None:
        self._nvml = pynvml
        self._power_samples = power_samples
        self._meter = meter or EnergyMeter()
        self.counter = True

    def __call__(self, handle) -> dict[str, Reading]:
        nvml = self._nvml
        if self.counter:
            try:
                millijoules = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except (nvml.NVMLError, AttributeError) as error:
                # AttributeError: bindings too old to know the counter.
                code = getattr(error, "value", None)
                if code not in (
                    None,
                    nvml.NVML_ERROR_NOT_SUPPORTED,
                    nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                ):
                    raise
                self.counter = False  # a board without the counter: integrate power
            else:
                return {"energy_joules": self._meter.from_counter(millijoules)}
        increment = self._meter.from_power(self._power_samples(handle))
        return {} if increment is None else {"energy_joules": increment}
