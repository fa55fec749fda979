"""Small hand-written fakes for hardware and time (see the design guide, convention 8)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable


class FakeSource:
    """A source whose readings come from a function of the read count.

    Args:
        name: Tag prefix, e.g. ``"gpu0"``.
        values: ``{metric: value}`` returned on every read, or a callable taking the 1-based
            read number and returning such a dict.
        fail_on: Read numbers on which ``read`` raises ``error`` instead.
    """

    def __init__(
        self,
        name: str,
        values: dict[str, float] | Callable[[int], dict[str, float]],
        fail_on: Iterable[int] = (),
        error: BaseException | None = None,
    ) -> None:
        self.name = name
        self._values = values
        self._fail_on = set(fail_on)
        self._error = error or RuntimeError("fake failure")
        self.reads = 0
        self.closed = False

    def read(self) -> dict[str, float]:
        self.reads += 1
        if self.reads in self._fail_on:
            raise self._error
        if callable(self._values):
            return dict(self._values(self.reads))
        return dict(self._values)

    def close(self) -> None:
        self.closed = True


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class CostClock(FakeClock):
    """A :class:`FakeClock` that several threads may advance (a fit loop and tf.data's
    threads charging their known costs to it)."""

    def __init__(self, start: float = 0.0) -> None:
        super().__init__(start)
        self._lock = threading.Lock()

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def charge_calls(model, clock: FakeClock, *, launch: float, per_step: float, kind: str = "train"):
    """Make every call of ``model``'s train (or predict) function cost a known time on ``clock``.

    Keras calls the function once per ``steps_per_execution`` steps, so a call costs ``launch``
    (the fixed cost of a call) plus ``per_step`` for each step it runs: the shape of a
    launch-bound or a compute-bound model, without timing the real one.

    Args:
        model: A Keras model.
        clock: The clock charged, the one given to the code under test.
        launch: Seconds per call, or a function of the model giving them when it is called
            (a cost that depends on its setup, e.g. ``model.jit_compile``).
        per_step: Seconds per step of a call, or a function of the model, as ``launch``.
        kind: ``"train"`` or ``"predict"``.

    Returns:
        ``model``, whose ``make_<kind>_function`` now wraps what Keras builds.
    """
    make = getattr(model, f"make_{kind}_function")
    attribute = f"{kind}_function"

    def make_charged(force=False):
        make(force)
        inner = getattr(model, attribute)
        if getattr(inner, "charged", False):
            return inner

        def charged(*args, **kwargs):
            cost = lambda value: value(model) if callable(value) else value  # noqa: E731
            clock.advance(cost(launch) + cost(per_step) * int(model.steps_per_execution))
            return inner(*args, **kwargs)

        charged.charged = True
        setattr(model, attribute, charged)
        return charged

    setattr(model, f"make_{kind}_function", make_charged)
    return model


class FakeCpuCounters:
    """The kernel's CPU counters as a machine with known load would show them.

    Per wall second, this process spends ``own_cores`` CPU seconds and other programs
    ``other_cores``; :class:`tfthroughput.hardware.cpu_share.CpuShareMeter` then reads exactly
    these shares, however busy the real machine is (the suite runs two workers side by side).
    """

    def __init__(self, own_cores: float, other_cores: float = 0.0) -> None:
        self.own_cores = own_cores
        self.other_cores = other_cores
        self._instant: float | None = None

    def clock(self) -> float:
        """The meter's wall clock. The meter reads it, then ``own``, then ``machine``: those
        two answer for this same instant, so a thread switch between the three reads (a
        loaded machine) cannot skew the shares."""
        self._instant = time.perf_counter()
        return self._instant

    def own(self) -> float:
        return self._now() * self.own_cores

    def machine(self) -> float:
        now, self._instant = self._now(), None  # the reading's last read
        return now * (self.own_cores + self.other_cores)

    def _now(self) -> float:
        return time.perf_counter() if self._instant is None else self._instant
