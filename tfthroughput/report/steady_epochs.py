"""Which epochs a comparison of runs uses, and the speed-up stated from them.

The first epoch of a run includes tracing, compilation and filling caches, so comparisons leave
it out when there are two or more: the report's table and the demo's terminal line take the
same median of the same epochs and say which ones, so their speed-ups agree.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def steady_epochs(values: Sequence[float]) -> Sequence[float]:
    """The epochs a comparison uses: all but the first, which includes tracing, compilation and
    filling caches, when there are two or more.

    Example:
        >>> steady_epochs([257.0, 629.0, 707.0]), steady_epochs([300.0])
        ([629.0, 707.0], [300.0])
    """
    return values[1:] if len(values) >= 2 else values


def steady_median(values: Sequence[float]) -> float:
    """The median of :func:`steady_epochs`: the figure the report and the demo compare.

    Example:
        >>> steady_median([257.0, 629.0, 707.0])
        668.0
    """
    return statistics.median(steady_epochs(values))


def steady_label(epochs: int) -> str:
    """How :func:`steady_median` of ``epochs`` epochs is stated, with epochs counted from 1.

    Example:
        >>> steady_label(1), steady_label(2), steady_label(3)
        ('epoch 1', 'epoch 2', 'median of epochs 2-3')
    """
    if epochs <= 2:
        return f"epoch {epochs}"
    return f"median of epochs 2-{epochs}"


@dataclass(frozen=True)
class Speedup:
    """How much faster one run trained than the baseline, stated as the terminal states it.

    Attributes:
        run: The faster (or slower) run's name.
        baseline: The first run's name.
        ratio: ``run``'s figure over ``baseline``'s.
        unit: ``"examples/s"``, or ``"steps/s"`` where no run logged examples/s.
        label: Which epochs the figures are, e.g. ``"median of epochs 2-3"``.
    """

    run: str
    baseline: str
    ratio: float
    unit: str
    label: str

    def __str__(self) -> str:
        return f"{self.run} vs {self.baseline}: {self.ratio:.2f}x {self.unit} ({self.label})"
