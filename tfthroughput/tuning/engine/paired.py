"""The one decision rule of ``tune``: a candidate against the baseline timed beside it.

A comparison is the list of its per-round ratios (the candidate's examples/s over the
baseline's in the same round). Alternated rounds make each ratio immune to load that drifts
over the rounds: a load ramp slows both sides of a round alike. So the figure is the median
ratio, and its interval is distribution-free: the order statistics of the ratios that cover
the median with at least :data:`COVERAGE` by the sign test (each ratio falls on either side
of the true median with probability one half, whatever the load). Neither side's absolute
spread plays a part.

- *faster*: the interval's low end exceeds ``1 + MIN_GAIN``;
- *slower*: its high end is below 1;
- otherwise *not shown faster* (within the noise).

The rule is sequential (:func:`settled`): rounds are added, up to :data:`MAX_ROUNDS`, until the
interval is narrow (relative half-width at most :data:`NARROW`) or clearly above or below
``1 + MIN_GAIN``, *faster* can no longer be reached within the cap, or the caller's budget
stops it. Fewer than 5 rounds give no interval at 90 %, so no verdict of *faster*. The
figures measured for :data:`MIN_GAIN`: ``docs/tuning.md`` ("The paired rule").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Coverage of the median's interval, at least.
COVERAGE = 0.90
# What the interval's low end must exceed 1 by: two identical setups timed beside each other on
# the 2-core development machine read medians of 0.97-1.03 (docs/tuning.md).
MIN_GAIN = 0.03
# Relative half-width at which a comparison stops adding rounds.
NARROW = 0.07
# Most rounds a comparison runs.
MAX_ROUNDS = 15

FASTER = "faster"
NOT_SHOWN = "not shown faster"
SLOWER = "slower"


def sign_test_rank(rounds: int, coverage: float = COVERAGE) -> tuple[int, float]:
    """The 1-based rank ``k`` whose order statistics ``[r(k), r(n-k+1)]`` cover the median of
    ``rounds`` ratios with the highest rank reaching ``coverage``, and their coverage
    ``1 - 2 P(Binomial(n, 1/2) < k)``; ``k = 1`` (the min and max) where none reaches it.

    Example:
        >>> sign_test_rank(5)
        (1, 0.9375)
        >>> sign_test_rank(8)
        (2, 0.9296875)
    """
    best = (1, 1.0 - 2.0 * 0.5**rounds)
    below = 0.0
    for rank in range(1, rounds // 2 + 1):
        below += math.comb(rounds, rank - 1) * 0.5**rounds
        covered = 1.0 - 2.0 * below
        if covered < coverage:
            break
        best = (rank, covered)
    return best


@dataclass(frozen=True)
class PairedRatio:
    """The median of per-round ratios and its sign-test interval.

    Attributes:
        ratios: Candidate over baseline, round by round.
        median: Their median.
        low: The interval's low end (an order statistic of the ratios).
        high: Its high end.
        coverage: The interval's coverage of the true median (below :data:`COVERAGE` with
            fewer than 5 rounds: then no verdict of *faster*).
    """

    ratios: tuple[float, ...]
    median: float
    low: float
    high: float
    coverage: float

    @property
    def half_width(self) -> float:
        """The interval's half-width relative to the median."""
        return (self.high - self.low) / 2.0 / max(self.median, 1e-12)

    @property
    def covered(self) -> bool:
        return self.coverage >= COVERAGE

    @property
    def verdict(self) -> str:
        """``"faster"``, ``"slower"`` or ``"not shown faster"``."""
        if self.covered and self.low > 1.0 + MIN_GAIN:
            return FASTER
        if self.covered and self.high < 1.0:
            return SLOWER
        return NOT_SHOWN


def paired_ratio(ratios: Sequence[float]) -> PairedRatio:
    """The figure of a comparison from its per-round ratios.

    Example:
        >>> found = paired_ratio([1.52, 1.66, 1.89, 1.60, 1.70])
        >>> found.median, found.low, found.high, found.verdict
        (1.66, 1.52, 1.89, 'faster')
    """
    if not ratios:
        raise ValueError("A comparison needs at least one round. Received: ratios=[]")
    ordered = sorted(ratios)
    rank, coverage = sign_test_rank(len(ordered))
    low, high = ordered[rank - 1], ordered[len(ordered) - rank]
    return PairedRatio(tuple(ratios), statistics.median(ordered), low, high, coverage)


def settled(found: PairedRatio, *, cap: int = MAX_ROUNDS) -> bool:
    """Whether a comparison may stop adding rounds: at the ``cap``, or with an interval of
    :data:`COVERAGE` that is narrow, clearly above or below ``1 + MIN_GAIN``, or past reaching
    *faster* within the ``cap`` (:func:`faster_reachable`)."""
    if len(found.ratios) >= cap:
        return True
    if not found.covered:
        return False
    threshold = 1.0 + MIN_GAIN
    clearly = found.low > threshold or found.high < threshold
    return found.half_width <= NARROW or clearly or not faster_reachable(found.ratios, cap)


def faster_reachable(ratios: Sequence[float], cap: int) -> bool:
    """Whether more rounds, up to ``cap``, could still make a verdict of *faster*: the low end
    at ``n`` rounds is the ``k``-th lowest ratio, ``k`` never above its value at ``cap``, so
    that many ratios at or below ``1 + MIN_GAIN`` rule *faster* out for good. Rounds added past
    that could only narrow a verdict the search does not act on.

    Example:
        >>> faster_reachable([1.0, 1.2, 0.9, 1.3, 1.01], cap=15)  # 3 low: 4 rule it out
        True
        >>> faster_reachable([1.0, 1.2, 0.9, 1.3, 1.01, 1.02], cap=15)
        False
    """
    rank, _ = sign_test_rank(cap)
    return sum(ratio <= 1.0 + MIN_GAIN for ratio in ratios) < rank
