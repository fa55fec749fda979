"""The source interface: what the sampler reads, and the two ways reading can fail.

A source is anything with a ``name`` (the tag prefix, e.g. ``"gpu0"`` or ``"host"``), a
``read()`` returning ``{metric_name: reading}`` for what it can measure right now, and
``close()``. Tests inject small fakes with the same three members.

A reading is a number (the value now) or :class:`TimedSamples` (values the hardware sampled
itself, each with its age, which the sampler files by time).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable


class TimedSamples(NamedTuple):
    """Values the hardware sampled on its own schedule, each with how long ago it was taken.

    The sampler files each sample into the window its time falls in (its read time minus its
    age), so a window holds every hardware sample taken inside it, however seldom it is read.

    Attributes:
        samples: ``(age_seconds, value)`` pairs: the age is counted back from the moment
            ``read()`` returns (0 = just taken).
        fallback: A point reading taken because the hardware had no new sample; it stands in
            only for a window that ends up with no timed sample of this metric.
    """

    samples: tuple[tuple[float, float], ...]
    fallback: float | None = None


Reading = float | TimedSamples


class MonitoringWarning(UserWarning):
    """A monitoring problem that does not stop training (a metric dropped, a GPU lost, ...)."""


class SourceLost(Exception):
    """Raised by ``Source.read`` when the source is gone for good (e.g. the GPU fell off the bus).

    The sampler stops sampling that source and keeps the others.
    """


@runtime_checkable
class Source(Protocol):
    name: str

    def read(self) -> dict[str, Reading]: ...

    def close(self) -> None: ...
