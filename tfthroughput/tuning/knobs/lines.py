"""A line of knob values, tried while it gains: the rule every knob that walks values uses.

A knob is a function of the search (``engine.search``) that tries setups on top of the best so far.
The knobs live by what they change (``knobs.batch``, ``knobs.steps_per_execution``,
``knobs.xla_and_policy``, ``knobs.pipeline``); each mode's workload holds its order of them
(``training_knobs``, ``inference_knobs``; documented knob by knob there and in
``docs/tuning.md``: "What it tries, in order"; "Inference"). A line of knob values
(:func:`double_along`, :func:`walk_along`) stops at its bound, at a trial that ends it, or
after ``PATIENCE`` values in a row without a gain. Every trial is measured against the
baseline in alternated rounds; a trial is skipped when the time left is less than 1.25 times
the cost of the dearest recent trial (``engine.search``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tfthroughput.tuning.engine.measure import MIN_NOISE
from tfthroughput.tuning.engine.search import Search
from tfthroughput.tuning.engine.verdict import FAILED, FASTER, OUTPUTS_DIFFER, OVER_LATENCY

PATIENCE = 2  # values in a row without a gain before a line stops
LINE_GAIN = MIN_NOISE  # a value gains when its ratio beats the line's best by this
Knob = Callable[[Search], None]
# What ends a line of predict setups: a failure, outputs off the baseline's, a batch too slow.
ENDS_AN_INFERENCE_LINE = (FAILED, OUTPUTS_DIFFER, OVER_LATENCY)


def double_along(
    value: int,
    bound: int,
    try_at: Callable[[int], Any],
    ends: Callable[[Any], bool],
    *,
    line_best: float = 1.0,
) -> float:
    """Try ``try_at(value)``, doubling ``value`` up to ``bound`` (:func:`walk_along`)."""
    return walk_along(doublings(value, bound), try_at, ends, line_best=line_best)


def walk_along(
    values: Iterable[int],
    try_at: Callable[[int], Any],
    ends: Callable[[Any], bool],
    *,
    line_best: float = 1.0,
    misses: int = 0,
) -> float:
    """Try ``try_at`` at each of ``values`` in turn while the trials keep gaining; the line's
    best ratio at the end.

    Args:
        values: The values, in the order tried.
        try_at: Runs the trial at a value; returns it, or ``None`` when the time budget ran out.
        ends: Whether a trial ends the line (a failure, a rejection); may note why.
        line_best: The ratio to the baseline that the first value must beat.
        misses: Values without a gain just before the first one (the row it continues).
    """
    for value in values:
        if misses >= PATIENCE:
            break
        trial = try_at(value)
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
    A ratio above the line's best that the rounds cannot tell from the baseline is no gain:
    counted as one, it carries lines through values that only the noise lifted (measured:
    docs/tuning.md, "Why the search is shaped so")."""
    return trial.status == FASTER and trial.ratio > line_best * (1.0 + LINE_GAIN)


def doublings(value: int, bound: int) -> Iterator[int]:
    while value <= bound:
        yield value
        value *= 2


def halvings(value: int, floor: int) -> Iterator[int]:
    while value >= floor:
        yield value
        value //= 2
