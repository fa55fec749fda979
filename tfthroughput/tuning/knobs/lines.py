"""A line of knob values, tried while it gains: the rule every knob that walks values uses.

A knob is a generator of proposals (``engine.search.Knob``); a line is one too, so a knob runs
it with ``yield from`` and gets its best ratio back. A line stops at its bound, at a trial
that ends it (the mode's ``line_ends``), when the budget is spent, or after ``PATIENCE``
values in a row without a gain.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from tfthroughput.tuning.engine.contract import Proposal
from tfthroughput.tuning.engine.measure import MIN_NOISE
from tfthroughput.tuning.engine.verdict import FASTER

PATIENCE = 2  # values in a row without a gain before a line stops
LINE_GAIN = MIN_NOISE  # a value gains when its ratio beats the line's best by this
Line = Generator[Proposal, Any, float]


def walk_along(
    values: Iterable[int],
    proposal_at: Callable[[int], Proposal | None],
    ends: Callable[[Any], bool],
    *,
    line_best: float = 1.0,
    misses: int = 0,
) -> Line:
    """Propose ``proposal_at`` each of ``values`` in turn while the trials keep gaining; the
    line's best ratio at the end.

    Args:
        values: The values, in the order tried.
        proposal_at: The proposal at a value, or ``None`` where the line must stop.
        ends: Whether a trial ends the line (a failure, a rejection); may note why.
        line_best: The ratio to the baseline that the first value must beat.
        misses: Values without a gain just before the first one (the row it continues).
    """
    for value in values:
        if misses >= PATIENCE:
            break
        proposal = proposal_at(value)
        if proposal is None:
            break
        trial = yield proposal
        if trial is None or ends(trial):
            break
        if gains(trial, line_best):
            line_best, misses = trial.ratio, 0
        else:
            misses += 1
    return line_best


def gains(trial: Any, line_best: float) -> bool:
    """Whether a trial carries its line on: faster than the baseline beyond the noise (the
    rule that makes a trial the best setup), and beating the line's best by ``LINE_GAIN``.
    A ratio above the line's best that the rounds cannot tell from the baseline is no gain
    (docs/tuning.md, "Why the search is shaped so")."""
    return trial.status == FASTER and trial.ratio > line_best * (1.0 + LINE_GAIN)


def doublings(value: int, bound: int) -> Iterator[int]:
    while value <= bound:
        yield value
        value *= 2


def halvings(value: int, floor: int) -> Iterator[int]:
    while value >= floor:
        yield value
        value //= 2
