"""tune's knobs (tuning/knobs/) on their own: each is a generator of proposals, driven here by
hand with a read-only view of a fake search and the trials a known speed table gives. No
model, no engine: what a knob proposes, in which order, and when it stops."""

from __future__ import annotations

from dataclasses import dataclass

from tfthroughput.tuning.engine.contract import BestSoFar, Mode, SearchSettings
from tfthroughput.tuning.engine.verdict import FAILED, FASTER, NOT_FASTER, OVER_LATENCY
from tfthroughput.tuning.knobs.batch import batch_knob
from tfthroughput.tuning.knobs.lines import PATIENCE, walk_along
from tfthroughput.tuning.knobs.steps_per_execution import (
    line_again_on_a_new_best,
    steps_per_execution_line,
    xla_around_the_best,
)
from tfthroughput.tuning.knobs.xla_and_policy import policy_knob, xla_knob
from tfthroughput.tuning.setup import TuneSetup

GIVEN = TuneSetup(1, False, "float32", batch_size=16)


@dataclass(frozen=True)
class Trial:
    setup: TuneSetup
    status: str
    ratio: float
    latency_p95_ms: float | None = None


@dataclass(frozen=True)
class Comparison:
    ratio: float


@dataclass(frozen=True)
class Data:
    batch_size: int | None = 16
    examples: int | None = None
    batch_note: str | None = None


class View:
    """The read-only view a knob gets, over a fake search whose best moves as the engine's."""

    def __init__(
        self, *, data=None, policy=None, try_xla=True, epoch=None, bound=1024, ends=(), **mode
    ):
        self.base, self.best, self.notes = GIVEN, BestSoFar(GIVEN), []
        self.settings = SearchSettings(
            steps=128,
            rounds=3,
            time_budget=60.0,
            seed=0,
            max_steps_per_execution=1024,
            policy=policy,
            try_xla=try_xla,
            notes=(),
        )
        self.mode = Mode(
            data=data or Data(),
            line_ends=frozenset({FAILED, *ends}),
            most_batch_factor=mode.pop("most_batch_factor", 4),
            steps_per_execution_bound=lambda setup: (bound, ""),
            epoch_steps=epoch,
            **mode,
        )

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)


def drive(knob, view, speed, *, budget=None):
    """Run ``knob`` to its end: each proposal's trial from ``speed(setup)`` (a ratio, or a
    status), the best moved as the engine moves it; the setups proposed, in order."""
    proposed, proposals, trial = [], knob(view), None
    while True:
        try:
            proposal = proposals.send(trial)
        except StopIteration:
            return proposed
        proposed.append(proposal.setup)
        if budget is not None and len(proposed) > budget:
            trial = None
            continue
        found = speed(proposal.setup)
        if isinstance(found, str):
            trial = Trial(proposal.setup, found, 1.0, latency_p95_ms=9.0)
        else:
            status = FASTER if found > 1.03 else NOT_FASTER
            trial = Trial(proposal.setup, status, found)
            if status == FASTER and found > view.best.ratio:
                view.best = BestSoFar(proposal.setup, Comparison(found))


def spe(*values, jit=False, **changes):
    return [GIVEN.with_(steps_per_execution=v, jit_compile=jit, **changes) for v in values]


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


def test_a_line_hands_back_its_best_ratio_to_the_knob_that_runs_it():
    def knob(view):
        best = yield from walk_along([2, 4], lambda v: _proposal(v), lambda t: False)
        knob.best = best

    drive(knob, View(), lambda s: {2: 1.4, 4: 1.2}[s.steps_per_execution])
    assert knob.best == 1.4


def test_xla_is_flipped_at_the_lines_best_then_walked_up_and_down_from_it():
    view = View()
    view.best = BestSoFar(spe(8)[0], Comparison(3.0))
    xla = {8: 3.5, 16: 3.0, 32: 2.0, 4: 3.7, 2: 3.0, 1: 2.0}
    proposed = drive(xla_around_the_best, view, lambda s: xla[s.steps_per_execution])
    assert proposed == spe(8, 16, 32, 4, 2, 1, jit=True)
    assert view.best.setup == spe(4, jit=True)[0]
    assert drive(xla_around_the_best, View(try_xla=False), lambda s: 2.0) == []


def test_the_policy_is_tried_again_with_xla_as_given_where_the_flipped_best_keeps_float32():
    view = View(policy="mixed_bfloat16")
    view.best = BestSoFar(spe(4, jit=True)[0], Comparison(2.0))
    speeds = {True: 1.5, False: 2.5}  # bfloat16 slower under XLA, faster without
    proposed = drive(policy_knob, view, lambda s: speeds[s.jit_compile])
    assert proposed == spe(4, jit=True, policy="mixed_bfloat16") + spe(4, policy="mixed_bfloat16")
    assert drive(policy_knob, View(policy="float32"), lambda s: 2.0) == []  # the one in force


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


def test_the_batch_knob_says_why_it_tries_nothing_and_stays_within_the_data():
    view = View(data=Data(batch_size=None, batch_note="batch size not tried: already batched"))
    assert drive(batch_knob, view, lambda s: 2.0) == []
    assert view.notes == ["batch size not tried: already batched"]
    view = View(data=Data(examples=48))
    proposed = drive(batch_knob, view, lambda s: s.batch_size / 16)
    assert [s.batch_size for s in proposed] == [32]  # 64 is past the 48 examples
    assert view.notes == ["batch size bounded by the 48 examples in the data"]


def test_the_batch_knob_stops_at_the_latency_limit_or_before_it_where_the_given_batch_is_over():
    view = View(
        most_batch_factor=128,
        latency_limit_ms=2.0,
        baseline_p95_ms=lambda: 1.0,
        ends=(OVER_LATENCY,),
    )
    speeds = lambda s: OVER_LATENCY if s.batch_size >= 128 else s.batch_size / 16  # noqa: E731
    assert [s.batch_size for s in drive(batch_knob, view, speeds)] == [32, 64, 128]
    assert view.notes == [
        "batch size bounded by the latency limit: 128 takes 9.00 ms per batch (p95), over 2 ms"
    ]
    slow = View(latency_limit_ms=2.0, baseline_p95_ms=lambda: 3.0)
    assert drive(batch_knob, slow, lambda s: 2.0) == []
    assert slow.notes == [
        "batch size not raised: the given batch's p95 latency (3.00 ms) already exceeds the "
        "limit (2 ms)"
    ]


def test_xla_is_flipped_once_on_the_best_in_inference():
    assert drive(xla_knob, View(), lambda s: 2.0) == [GIVEN.with_(jit_compile=True)]
    assert drive(xla_knob, View(try_xla=False), lambda s: 2.0) == []


def _proposal(value):
    from tfthroughput.tuning.engine.contract import Proposal

    return Proposal(GIVEN.with_(steps_per_execution=value))
