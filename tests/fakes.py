"""Small hand-written fakes for hardware and time (see the design guide, convention 8)."""

from __future__ import annotations

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
