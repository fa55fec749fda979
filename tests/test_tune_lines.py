"""tuning/knobs/lines.py: the rule every knob that walks values uses, on hand-made trials."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from knob_driving import View, drive, proposal

from tfthroughput.tuning.engine.verdict import FAILED, FASTER, NOT_FASTER
from tfthroughput.tuning.knobs.lines import (
    LINE_GAIN,
    PATIENCE,
    doublings,
    gains,
    halvings,
    walk_along,
)


@dataclass(frozen=True)
class Judged:
    status: str
    ratio: float


def walk(line, trials):
    """The values ``line`` proposes when sent ``trials`` in turn, and the best it hands back."""
    proposed, trial = [], None
    try:
        while True:
            proposed.append(line.send(trial).setup.steps_per_execution)
            trial = trials.pop(0)
    except StopIteration as end:
        return proposed, end.value


def test_a_line_hands_back_its_best_ratio_to_the_knob_that_runs_it():
    def knob(view):
        best = yield from walk_along([2, 4], proposal, lambda t: False)
        knob.best = best

    drive(knob, View(), lambda s: {2: 1.4, 4: 1.2}[s.steps_per_execution])
    assert knob.best == 1.4


def test_a_line_stops_after_patience_values_without_a_gain_counting_the_row_it_continues():
    misses = [Judged(NOT_FASTER, 1.0)] * 5
    assert walk(walk_along([2, 4, 8, 16], proposal, lambda t: False), list(misses)) == (
        [2, 4],
        1.0,
    )
    continued = walk_along([2, 4, 8], proposal, lambda t: False, misses=PATIENCE - 1)
    assert walk(continued, list(misses)) == ([2], 1.0)


def test_a_line_stops_where_no_proposal_is_left_or_a_trial_ends_it():
    gaining = [Judged(FASTER, 2.0), Judged(FASTER, 3.0), Judged(FASTER, 4.0)]
    short = walk_along([2, 4, 8], lambda v: proposal(v) if v < 8 else None, lambda t: False)
    assert walk(short, list(gaining)) == ([2, 4], 3.0)
    ended = walk_along([2, 4, 8], proposal, lambda t: t.status == FAILED)
    assert walk(ended, [Judged(FASTER, 2.0), Judged(FAILED, 1.0)]) == ([2, 4], 2.0)


@pytest.mark.parametrize(
    ("status", "ratio", "gained"),
    [
        (FASTER, 2.0 * (1 + LINE_GAIN) * 1.001, True),
        (FASTER, 2.0 * (1 + LINE_GAIN) * 0.999, False),  # above the line's best, not by enough
        (NOT_FASTER, 3.0, False),  # a ratio the rounds cannot tell from the baseline
    ],
)
def test_a_gain_is_faster_than_the_baseline_and_beats_the_lines_best_by_the_line_gain(
    status, ratio, gained
):
    assert gains(Judged(status, ratio), line_best=2.0) is gained


def test_doublings_and_halvings_stay_within_their_bounds():
    assert list(doublings(2, 20)) == [2, 4, 8, 16]
    assert list(halvings(16, 3)) == [16, 8, 4]
