"""One line of a knob search: double a knob while its trials keep gaining.

The training search walks ``steps_per_execution`` this way (under each XLA setting), the
inference search the batch size and ``steps_per_execution``; a line stops at its bound, at a
trial that ends it, or after ``PATIENCE`` doublings in a row without a gain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfthroughput.tuning._measure import MIN_NOISE

PATIENCE = 2  # doublings in a row without a gain before a line stops
LINE_GAIN = MIN_NOISE  # a doubling gains when its ratio beats the line's best by this


def double_along(
    value: int,
    bound: int,
    try_at: Callable[[int], Any],
    ends: Callable[[Any], bool],
    *,
    line_best: float = 1.0,
) -> None:
    """Try ``try_at(value)``, doubling ``value`` up to ``bound``.

    Args:
        value: The first value tried.
        bound: The largest value tried.
        try_at: Runs the trial at a value; returns it, or ``None`` when the time budget ran out.
        ends: Whether a trial ends the line (a failure, a rejection); may note why.
        line_best: The ratio to the baseline that the first doubling must beat.
    """
    misses = 0
    while value <= bound and misses < PATIENCE:
        trial = try_at(value)
        if trial is None or ends(trial):
            return
        if trial.ratio > line_best * (1.0 + LINE_GAIN):
            line_best, misses = trial.ratio, 0
        else:
            misses += 1
        value *= 2
