"""Which epochs a comparison of runs uses, and the speed-up stated from them.

The first epoch of a run includes tracing, compilation and filling caches, so comparisons leave
it out when there are two or more: the report's table and the demo's terminal line take the
same median of the same epochs and say which ones, so their speed-ups agree.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tfthroughput._ratio_text import ratio_text, unpaired_range, unpaired_words


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
        low: The lowest ratio the two runs' epochs allow (the slowest of ``run``'s over the
            fastest of ``baseline``'s); ``None`` where the epochs are not known.
        high: The highest; ``None`` where the epochs are not known.
        epochs: Epochs of each run the range is taken over.
        overlap: Whether the two runs' epoch ranges overlap: the ratio is within the noise.
    """

    run: str
    baseline: str
    ratio: float
    unit: str
    label: str
    low: float | None = None
    high: float | None = None
    epochs: int = 0
    overlap: bool = False

    def __str__(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.run} vs {self.baseline}: {self.ratio:.2f}x {self.unit} ({self.label})"
        figure = ratio_text(self.ratio, self.low, self.high)
        words = unpaired_words(self.epochs, self.overlap)
        return f"{self.run} vs {self.baseline}: {figure} {self.unit} ({self.label}; {words})"


def speedup(
    run: str, baseline: str, values: Sequence[float], base: Sequence[float], unit: str
) -> Speedup:
    """``run``'s speed-up over ``baseline`` from each one's per-epoch figure (higher is
    faster), over :func:`steady_epochs`: the ratio of the medians and the range the epochs
    allow, two runs not timed side by side.

    Example:
        >>> print(speedup("b", "a", [90.0, 300.0, 330.0], [50.0, 100.0, 110.0], "examples/s"))
        b vs a: 3.00x [2.73-3.30] examples/s (median of epochs 2-3; range of 2 epochs each)
    """
    mine, theirs = steady_epochs(values), steady_epochs(base)
    ratio, low, high, overlap = unpaired_range(mine, theirs)
    label = steady_label(min(len(values), len(base)))
    epochs = min(len(mine), len(theirs))
    return Speedup(run, baseline, ratio, unit, label, low, high, epochs, overlap)
