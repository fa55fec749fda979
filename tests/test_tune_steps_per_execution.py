"""tuning/knobs/steps_per_execution.py: the steps_per_execution line, XLA walked around its best,
and the line run again from a best another knob made, driven by hand (tests/knob_driving.py)."""

from __future__ import annotations

from knob_driving import Comparison, View, drive, spe

from tfthroughput.tuning.engine.contract import BestSoFar
from tfthroughput.tuning.engine.verdict import FAILED
from tfthroughput.tuning.knobs.lines import PATIENCE
from tfthroughput.tuning.knobs.steps_per_execution import (
    line_again_on_a_new_best,
    steps_per_execution_line,
    xla_around_the_best,
)
from tfthroughput.tuning.knobs.xla_and_policy import policy_knob


def test_a_line_doubles_while_it_gains_and_stops_after_patience_values_without_one():
    gains = {2: 1.5, 4: 2.0, 8: 1.9, 16: 2.01, 32: 3.0}
    view = View()
    proposed = drive(steps_per_execution_line, view, lambda s: gains[s.steps_per_execution])
    # 8 and 16 do not beat 2.0 by the line's gain (16 still becomes the best, by any gain).
    assert proposed == spe(2, 4, 8, 16)
    assert PATIENCE == 2 and view.best.setup == spe(16)[0]


def test_a_line_stops_at_its_bound_at_a_failure_and_at_a_value_that_does_not_divide_the_epoch():
    up = lambda s: float(s.steps_per_execution)  # noqa: E731
    assert drive(steps_per_execution_line, View(bound=8), up) == spe(2, 4, 8)
    failing = lambda s: FAILED if s.steps_per_execution == 4 else up(s)  # noqa: E731
    assert drive(steps_per_execution_line, View(), failing) == spe(2, 4)
    view = View(epoch=12)
    assert drive(steps_per_execution_line, view, up) == spe(2, 4)
    assert view.notes == [
        "steps_per_execution=8 and above not tried: they do not divide the epoch (12 steps)"
    ]


def test_xla_is_flipped_at_the_lines_best_then_walked_up_and_down_from_it():
    view = View()
    view.best = BestSoFar(spe(8)[0], Comparison(3.0))
    xla = {8: 3.5, 16: 3.0, 32: 2.0, 4: 3.7, 2: 3.0, 1: 2.0}
    proposed = drive(xla_around_the_best, view, lambda s: xla[s.steps_per_execution])
    assert proposed == spe(8, 16, 32, 4, 2, 1, jit=True)
    assert view.best.setup == spe(4, jit=True)[0]
    assert drive(xla_around_the_best, View(try_xla=False), lambda s: 2.0) == []


def test_a_line_runs_again_from_the_best_where_a_knob_made_a_new_one():
    view = View(policy="mixed_bfloat16")
    view.best = BestSoFar(spe(4)[0], Comparison(2.0))
    speeds = lambda s: 3.0 if s.steps_per_execution == 4 else 4.0  # noqa: E731
    proposed = drive(line_again_on_a_new_best(policy_knob), view, speeds, budget=3)
    assert proposed[:3] == spe(4, 8, 16, policy="mixed_bfloat16")
    unchanged = View(policy="mixed_bfloat16")
    assert drive(line_again_on_a_new_best(policy_knob), unchanged, lambda s: 1.0) == spe(
        1, policy="mixed_bfloat16"
    )
