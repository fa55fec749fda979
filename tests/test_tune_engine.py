"""The search engine (tuning/engine/search.py) against a fake workload with known costs: no model,
no fit. Each setup's runner takes a known number of seconds per run on a FakeClock, so every
ratio, the paired rule's verdicts and the best setup so far are exact."""

from __future__ import annotations

from dataclasses import dataclass

from fakes import FakeClock

from tfthroughput.tuning._result_base import TrialBase
from tfthroughput.tuning.engine.measure import GPUWindows
from tfthroughput.tuning.engine.search import BestSoFar, Search, SearchSettings, Workload
from tfthroughput.tuning.engine.trial_model import TrialFailed
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


class Runner:
    """``seconds`` per run on ``clock``; a start that fails where ``fails``."""

    steps, examples_per_step = 10, 8

    def __init__(self, setup, clock, seconds, fails=False):
        self.setup, self.clock, self.seconds, self.fails = setup, clock, seconds, fails
        self.warmup_seconds, self.memory_mib, self.notes, self.closed = 0.0, None, [], False

    def start(self):
        if self.fails:
            raise TrialFailed("out of memory")

    def rewarm(self):
        pass

    def run(self):
        self.clock.advance(self.seconds)
        return self.seconds

    def close(self):
        self.closed = True


class KnownCosts(Workload):
    """Every setup's run costs ``COSTS[steps_per_execution]`` seconds; 8 fails to start."""

    trial_type = Trial
    cannot_run = "The fake cannot run"
    COSTS = {1: 1.0, 2: 0.5, 4: 0.98, 8: 0.1}

    def __init__(self, build_model, data, settings, clock):
        super().__init__(build_model, data, settings, clock)
        self.runners = []
        self.knobs = (
            lambda search: [
                search.try_setup(GIVEN.with_(steps_per_execution=v)) for v in (2, 4, 8)
            ],
        )

    def _runner(self, setup):
        runner = Runner(
            setup,
            self.clock,
            self.COSTS[setup.steps_per_execution],
            fails=setup.steps_per_execution == 8,
        )
        self.runners.append(runner)
        return runner

    def baseline(self):
        runner = self._runner(GIVEN)
        runner.start()
        return runner

    def candidate(self, search, setup, **how):
        return self._runner(setup)

    def judge(self, search, setup, label, runner, comparison, **how):
        return Trial(setup, label, speed_status(comparison), **measured(comparison))

    def search_run_examples(self, search):
        return 80.0

    def chosen_notes(self, baseline, chosen):
        return []

    def result(self, **fields):
        return fields


def search() -> Search:
    settings = SearchSettings(
        steps=10,
        rounds=3,
        time_budget=1000.0,
        seed=0,
        max_steps_per_execution=8,
        policy=None,
        try_xla=False,
        notes=(),
    )
    return Search(KnownCosts, lambda: None, None, settings, FakeClock(), GPUWindows(None))


def test_the_engine_tries_each_setup_against_the_baseline_and_keeps_the_best_as_a_record():
    engine = search()
    result = engine.run()

    statuses = [(t.setup.steps_per_execution, t.status) for t in result["trials"]]
    assert statuses == [(1, BASELINE), (2, FASTER), (4, NOT_FASTER), (8, FAILED)]
    # 2x in every round: 5 rounds, the first with a 90 % interval, already one point.
    two = result["trials"][1]
    assert (two.ratio, two.ratio_low, two.ratio_high, two.rounds) == (2.0, 2.0, 2.0, 5)
    # 1.02x in every round: narrow, below 1 + MIN_GAIN: not shown faster, no more rounds.
    assert result["trials"][2].rounds == 5
    assert result["trials"][3].reason == "out of memory"
    assert isinstance(engine.best, BestSoFar)
    assert engine.best.setup == GIVEN.with_(steps_per_execution=2) and engine.best.ratio == 2.0
    assert result["chosen"] == engine.best.setup  # no confirmation asked
    assert all(runner.closed for runner in engine.workload.runners)


def test_the_baseline_is_the_best_until_a_trial_beats_it():
    engine = search()
    engine._measure_baseline()
    assert engine.best == BestSoFar(GIVEN) and engine.best.ratio == 1.0
    engine.base.close()
