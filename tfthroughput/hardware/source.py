"""The source interface: what the sampler reads, and the two ways reading can fail.

A source is anything with a ``name`` (the tag prefix, e.g. ``"gpu0"`` or ``"host"``), a
``read()`` returning ``{metric_name: value}`` for what it can measure right now, and
``close()``. Tests inject small fakes with the same three members.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class MonitoringWarning(UserWarning):
    """A monitoring problem that does not stop training (a metric dropped, a GPU lost, ...)."""


class SourceLost(Exception):
    """Raised by ``Source.read`` when the source is gone for good (e.g. the GPU fell off the bus).

    The sampler stops sampling that source and keeps the others.
    """


@runtime_checkable
class Source(Protocol):
    name: str

    def read(self) -> dict[str, float]: ...

    def close(self) -> None: ...
