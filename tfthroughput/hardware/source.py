"""The source interface: what the sampler reads, and the two ways reading can fail.

A source is anything with a ``name`` (the tag prefix, e.g. ``"gpu0"`` or ``"host"``), a
``read()`` returning ``{metric_name: reading}`` for what it can measure right now, and
``close()``. Tests inject small fakes with the same three members.

A reading is a number (the value now), :class:`TimedSamples` (values the hardware sampled
itself, each with its age, which the sampler files by time) or an :class:`Increment` (an
amount accumulated since the previous read, such as energy, which the sampler adds up per window).
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


class Increment(NamedTuple):
    """An amount accumulated over a span of time, such as the energy used since the last read.

    The sampler shares it out to windows by time: the part of the span before a window began
    belongs to the window before.

    Attributes:
        amount: What accumulated (e.g. joules).
        seconds: The span it accumulated over, ending ``age`` seconds before ``read()``
            returned.
        counter: True when the hardware counts it (NVML's energy counter), False when the
            source estimates it (e.g. by integrating sampled power).
        age: How long before ``read()`` returned the span ended, in seconds.
    """

    amount: float
    seconds: float
    counter: bool
    age: float = 0.0


Reading = float | TimedSamples | Increment


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
