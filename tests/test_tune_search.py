"""The search engine (tuning/engine/search.py) against a fake workload with known costs: no
model, no fit. Each setup's runner takes a known number of seconds per run on a FakeClock, so
every ratio, the paired rule's verdicts and the best setup so far are exact; the knobs are
generators that propose setups and are sent the judged trials back."""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass, replace

import keras
import numpy as np
import pytest
from fakes import FakeClock
from tiny_models import float32_policy  # noqa: F401 - fixture

from tfthroughput.tuning._result_base import TrialBase
from tfthroughput.tuning.engine.confirmation import ConfirmationPlan, run_examples
from tfthroughput.tuning.engine.contract import BestSoFar, Mode, Proposal, SearchSettings, Workload
from tfthroughput.tuning.engine.search import MAX_LENGTHENING, Search, lengthen
from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.engine.trial_runner import TrialRunner
from tfthroughput.tuning.engine.verdict import (
    BASELINE,
    FAILED,
    FASTER,
    NOT_FASTER,
    measured,
    speed_status,
)
from tfthroughput.tuning.setup import TuneSetup

GIVEN = TuneSetup(1, False, "float32", batch_size=8)


@dataclass(frozen=True)
class Trial(TrialBase):
    """A trial of the fake workload: the fields every trial has, and what the engine adds."""

    gpu_utilization: float | None = None
    sm_activity: float | None = None
    warmup_seconds: float | None = None
    memory_mib: float | None = None
    reason: str = ""


class Runner(TrialRunner):
    """``seconds`` per run on ``clock``; a start that fails where ``fails``. Each run records
    the names of the functions on the stack, to show which are there while a trial runs."""

    loop, host_memory = "train", False

    def __init__(self, setup, clock, seconds, fails=False):
        super().__init__(setup, lambda: None, steps=10, seed=0, clock=clock, batch_size=8)
        self.seconds, self.fails, self.closed = seconds, fails, False
        self.examples_per_step = 8
        self.stacks: list[set[str]] = []
        self.start_stack: set[str] = set()

    def start(self, *, user_model_errors=False):
        self.start_stack = {frame.function for frame in inspect.stack()}
        if self.fails:
            raise TrialFailed("out of memory")

    def run(self):
        self.stacks.append({frame.function for frame in inspect.stack()})
        self._clock.advance(self.seconds)
        return self.seconds

    def close(self):
        self.closed = True


def steps_per_execution_knob(view):
    """Proposes 2, 4 and 8, keeping what it was sent back."""
    sent_back = []
    for value in (2, 4, 8):
        trial = yield Proposal(GIVEN.with_(steps_per_execution=value))
        sent_back.append(trial)
    steps_per_execution_knob.sent_back = sent_back


class KnownCosts(Workload):
    """Every setup's run costs ``COSTS[steps_per_execution]`` seconds; 8 fails to start."""

    trial_type = Trial
    cannot_run = "The fake cannot run"
    COSTS = {1: 1.0, 2: 0.5, 4: 0.98, 8: 0.1}
    knobs = (steps_per_execution_knob,)

    def __init__(self, clock):
        self.clock, self.runners = clock, []

    def _runner(self, setup):
        spe = setup.steps_per_execution
        runner = Runner(setup, self.clock, self.COSTS[spe], fails=spe == 8)
        self.runners.append(runner)
        return runner

    def baseline(self):
        self.mode = Mode(None, frozenset({FAILED}), 1, lambda setup: (8, ""))
        return self._runner(GIVEN)

    def candidate(self, view, proposal):
        return self._runner(proposal.setup)

    def judge(self, view, proposal, runner, comparison):
        status = speed_status(comparison)
        return Trial(proposal.setup, proposal.label, status, **measured(comparison))

    def confirmation(self, view, candidates, most):
        raise AssertionError("no confirmation asked")

    def result(self, **fields):
        return fields


def search(
    budget: float = 1000.0, workload: type = KnownCosts, start: float = 0.0, **changes
) -> Search:
    fields = dict(
        steps=10,
        rounds=3,
        time_budget=budget,
        seed=0,
        max_steps_per_execution=8,
        policy=None,
        try_xla=False,
        notes=(),
    )
    clock = FakeClock(start)
    return Search(workload(clock), SearchSettings(**(fields | changes)), clock)


def test_the_engine_tries_each_proposal_against_the_baseline_and_keeps_the_best_as_a_record():
    engine = search()
    result = engine.run()

    statuses = [(t.setup.steps_per_execution, t.status) for t in result["trials"]]
    assert statuses == [(1, BASELINE), (2, FASTER), (4, NOT_FASTER), (8, FAILED)]
    # 2x in every round: 5 rounds, the first with a 90 % interval, already one point.
    two = result["trials"][1]
    assert (two.ratio, two.ratio_low, two.ratio_high, two.rounds) == (2.0, 2.0, 2.0, 5)
    assert two.label == "steps_per_execution=2"
    # 1.02x in every round: narrow, below 1 + MIN_GAIN: not shown faster, no more rounds.
    assert result["trials"][2].rounds == 5
    assert result["trials"][3].reason == "out of memory"
    # The baseline's speed is the median of its runs in every trial's rounds: 80 examples/s.
    assert result["trials"][0].examples_per_second == 8 * 10 / 1.0
    assert isinstance(engine.best, BestSoFar)
    assert engine.best.setup == GIVEN.with_(steps_per_execution=2) and engine.best.ratio == 2.0
    assert result["chosen"] == engine.best.setup  # no confirmation asked
    assert all(runner.closed for runner in engine.workload.runners)


def test_a_knob_is_sent_each_judged_trial_and_is_off_the_stack_while_it_runs():
    engine = search()
    result = engine.run()

    assert steps_per_execution_knob.sent_back == list(result["trials"][1:])
    timed = [stack for runner in engine.workload.runners for stack in runner.stacks]
    assert timed and all("run" in stack for stack in timed)
    assert not any("steps_per_execution_knob" in stack for stack in timed)


def test_a_judge_may_ask_for_runners_which_the_search_starts_with_the_judge_suspended():
    class AsksForRunners(KnownCosts):
        asked: list = []

        def judge(self, view, proposal, runner, comparison):
            # Two runners, the second failing to start: the judge hears which started.
            for fails in (False, True):
                extra = Runner(proposal.setup, self.clock, 0.0, fails=fails)
                started = yield extra
                self.asked.append((extra, started))
            return super().judge(view, proposal, runner, comparison)

    engine = search(workload=AsksForRunners)
    result = engine.run()

    statuses = [(t.setup.steps_per_execution, t.status) for t in result["trials"]]
    assert statuses == [(1, BASELINE), (2, FASTER), (4, NOT_FASTER), (8, FAILED)]
    asked = AsksForRunners.asked
    assert [started for _, started in asked] == [True, False] * 2  # 8 fails before its judge
    for extra, _ in asked:  # started by the search itself, the judge off the stack
        assert "trial" in extra.start_stack and "judge" not in extra.start_stack


def test_a_knob_is_sent_none_once_the_budget_is_spent():
    # The baseline's start costs nothing; each trial about 5 rounds of 1.5 s: 2 trials fit
    # in 20 s with the 1.25x margin, the third does not.
    engine = search(budget=20.0)
    result = engine.run()

    assert [t.setup.steps_per_execution for t in result["trials"]] == [1, 2, 4]
    assert steps_per_execution_knob.sent_back[2] is None
    assert result["stopped_by_budget"]


def test_the_baseline_is_the_best_until_a_trial_beats_it():
    engine = search()
    engine._measure_baseline()
    assert engine.best == BestSoFar(GIVEN) and engine.best.ratio == 1.0
    engine.base.close()


def test_a_baseline_that_cannot_run_leaves_nothing_to_tune():
    class FailingBaseline(KnownCosts):
        def baseline(self):
            raise TrialFailed("out of memory")

    with pytest.raises(RuntimeError) as caught:
        search(workload=FailingBaseline).run()
    assert str(caught.value) == "The fake cannot run, so there is nothing to tune: out of memory"
    assert isinstance(caught.value.__cause__, TrialFailed)


class Lengthened:
    """A run costs 0.01 s a step; ``set_steps`` sets its steps."""

    def __init__(self, steps):
        self.steps, self.examples_per_step, self.solo_speed, self.runs = steps, 8, None, []

    def run(self):
        self.runs.append(self.steps)
        return self.steps * 0.01

    def set_steps(self, steps):
        self.steps = steps


def test_the_baselines_run_is_doubled_until_it_lasts_long_enough():
    runner = Lengthened(10)
    lengthen(runner, runner.set_steps, min_seconds=1.0, steps=10)
    assert runner.runs == [10, 20, 40, 80, 160]  # 1.6 s: the first run of a second or more
    assert runner.solo_speed == pytest.approx(160 * 8 / 1.6)

    long_enough = Lengthened(200)
    lengthen(long_enough, long_enough.set_steps, min_seconds=1.0, steps=200)
    assert long_enough.runs == [200] and long_enough.solo_speed == pytest.approx(800.0)


def test_the_baselines_run_is_lengthened_at_most_64_times():
    runner = Lengthened(10)
    lengthen(runner, runner.set_steps, min_seconds=1000.0, steps=10)
    assert runner.steps == 10 * MAX_LENGTHENING == 640
    assert runner.runs[-2:] == [320, 640]


def test_the_notes_are_the_settings_then_the_knobs_each_once():
    def noting_knob(view):
        view.note("XLA not tried: the model has a layer XLA cannot compile")
        view.note("XLA not tried: the model has a layer XLA cannot compile")
        yield Proposal(GIVEN.with_(steps_per_execution=2), label="two steps a call")

    class Noting(KnownCosts):
        knobs = (noting_knob,)

    result = search(workload=Noting, notes=("given note",)).run()
    assert result["notes"] == (
        "given note",
        "XLA not tried: the model has a layer XLA cannot compile",
    )
    assert result["trials"][1].label == "two steps a call"  # a knob's own label is kept


def test_a_faster_trial_must_beat_the_best_by_the_workloads_margin():
    class Demanding(KnownCosts):
        best_margin = 1.5  # 2x is faster, but not 2.5x the baseline

    engine = search(workload=Demanding)
    result = engine.run()
    assert result["trials"][1].status == FASTER
    assert engine.best.setup == GIVEN and result["chosen"] == GIVEN


def test_the_confirmation_is_given_the_picks_and_its_share_of_the_searchs_time():
    asked = []
    confirmed = GIVEN.with_(steps_per_execution=4)

    class Confirming(KnownCosts):
        def candidate(self, view, proposal):
            self.clock.advance(60.0)  # a trial's build: time the search spent beyond its runs
            return super().candidate(view, proposal)

        def confirmation(self, view, candidates, most):
            asked.append((candidates, most))
            # The search times the plan and hands the timed confirmation to its finish.
            return ConfirmationPlan(self._runner, "fake runs", finish)

    timed = []

    def finish(confirmation):
        timed.append(confirmation)
        return replace(confirmation, setup=confirmed)

    result = search(workload=Confirming, start=1000.0, confirm_rounds=5).run()

    two = GIVEN.with_(steps_per_execution=2)
    # The baseline's median speed in the rounds, 80 examples/s; the pick at 2x; more than the
    # 80 examples of the search's own runs.
    most = run_examples(80.0, result["seconds"], 5, [2.0])
    assert 180 < result["seconds"] < 200 and most > 10 * 8
    assert asked == [([(two, "steps_per_execution=2")], pytest.approx(most))]
    assert result["confirmation"].setup == confirmed and result["chosen"] == confirmed
    (found,) = timed
    assert (found.setup, found.ratio, found.work) == (two, 2.0, "fake runs")


@pytest.mark.usefixtures("float32_policy")
def test_a_search_leaves_the_callers_policy_and_random_state_as_they_were():
    class Seeding(KnownCosts):
        def baseline(self):  # as a trial's model would: seeded and under another policy
            keras.utils.set_random_seed(0)
            keras.config.set_dtype_policy("mixed_bfloat16")
            return super().baseline()

    keras.config.set_dtype_policy("float16")
    policy = keras.config.dtype_policy()
    keras.utils.set_random_seed(5)
    expected = (random.random(), float(np.random.rand()))
    keras.utils.set_random_seed(5)

    search(workload=Seeding).run()

    assert keras.config.dtype_policy() is policy
    assert (random.random(), float(np.random.rand())) == expected
