"""Alternated rounds and the paired rule's rounds in tune's measurement, on fake runners
(no fit)."""

from __future__ import annotations

import pytest

from tfthroughput.tuning.engine.measure import GPUWindows, compare, compare_together
from tfthroughput.tuning.engine.paired import MAX_ROUNDS, MIN_GAIN
from tfthroughput.tuning.engine.trial_model import TrialFailed


class FakeRunner:
    """Returns the next of ``seconds`` per run and logs the order of runs."""

    def __init__(self, name, seconds, log, steps=10, examples_per_step=10):
        self.name, self._seconds, self._log = name, list(seconds), log
        self.steps, self.examples_per_step = steps, examples_per_step
        self.rewarmed_after_runs: list[int] = []  # runs logged (by any side) at each rewarm

    def rewarm(self):
        self.rewarmed_after_runs.append(len(self._log))

    def run(self):
        self._log.append(self.name)
        return self._seconds.pop(0)


def test_rounds_alternate_and_ratios_pair_each_round():
    log = []
    base = FakeRunner("base", [1.0, 1.0, 1.0, 1.0], log)
    cand = FakeRunner("cand", [0.5, 0.25, 0.5, 0.5], log)

    result = compare(base, cand, rounds=4, cap=4)

    assert log == ["base", "cand", "cand", "base", "base", "cand", "cand", "base"]
    assert result.baseline_examples_per_second == 100.0
    assert result.ratios == (2.0, 4.0, 2.0, 2.0) and result.ratio == 2.0
    # Four rounds give no interval of 90 % (the min and max cover 87.5 %): no verdict yet.
    assert result.coverage == pytest.approx(0.875) and not result.faster


def test_rounds_are_added_until_the_interval_settles():
    log = []
    base = FakeRunner("base", [1.0] * 20, log)
    cand = FakeRunner("cand", [0.5] * 20, log)

    result = compare(base, cand, rounds=3)

    # 3 rounds asked, 5 run: the first interval of 90 %, already narrow (2x every round).
    assert result.rounds == 5 and (result.ratio_low, result.ratio_high) == (2.0, 2.0)
    assert result.noise == 0.0 and result.faster and result.coverage == pytest.approx(0.9375)


def test_the_sign_test_interval_drops_one_outlier_from_eight_rounds():
    log = []
    base = FakeRunner("base", [1.0] * 8, log)
    # 2x in 7 rounds, one descheduled round at 0.5x: the interval is [r(2), r(7)].
    cand = FakeRunner("cand", [0.5, 0.5, 2.0, 0.5, 0.5, 0.5, 0.5, 0.5], log)

    result = compare(base, cand, rounds=8, cap=8)

    assert (result.ratio_low, result.ratio, result.ratio_high) == (2.0, 2.0, 2.0)
    assert result.faster and result.rounds_won == 7


def test_a_candidate_whose_own_runs_scatter_is_not_shown_faster():
    log = []
    base = FakeRunner("base", [1.0] * 15, log)  # a steady baseline
    # 0.6x to 2x around a 1.1x median, round after round: 2 rounds in 5 lose, the interval
    # stays wide. Its best rounds alone (2x) would make it the pick.
    cand = FakeRunner("cand", [0.5, 1 / 0.6, 1 / 1.1, 1 / 0.8, 1 / 1.4] * 3, log)

    result = compare(base, cand, rounds=3)

    # Its 9th round is its 4th at or below 1 + MIN_GAIN: at the cap's 15 rounds the low end is
    # the 4th lowest ratio, so no later round could make it faster, and the rounds stop there.
    assert result.ratio == pytest.approx(1.1) and result.rounds == 9 < MAX_ROUNDS
    assert result.ratio_low < 1 + MIN_GAIN and not result.faster
    assert result.verdict == "not shown faster"


def test_rounds_stop_once_faster_is_out_of_reach_and_go_on_while_it_is_not():
    log = []
    # Three low rounds, then high ones: the 4th lowest of 15 could still clear the threshold.
    late = [1.0, 0.95, 0.9] + [1.3] * 12
    recovers = compare(
        FakeRunner("base", [1.0] * 15, log), FakeRunner("cand", [1 / r for r in late], log), 3
    )
    assert recovers.faster and recovers.rounds == 13  # the first count whose low end is r(4)
    # The same with a 4th low round at the 5th: out of reach from there.
    early = [1.0, 0.95, 0.9, 1.3, 1.02] + [1.3] * 10
    stopped = compare(
        FakeRunner("base", [1.0] * 15, log), FakeRunner("cand", [1 / r for r in early], log), 3
    )
    assert stopped.rounds == 5 and stopped.verdict == "not shown faster"


def test_a_load_ramp_that_slows_both_sides_alike_keeps_the_verdict():
    log = []
    load = [1.0 + index / 4 for index in range(15)]  # up to 4.5 times slower by the end
    base = FakeRunner("base", [1.0 * x for x in load], log)
    cand = FakeRunner("cand", [0.8 * x for x in load], log)  # 1.25x in every round

    result = compare(base, cand, rounds=3)

    assert result.ratio == pytest.approx(1.25) and result.faster and result.rounds == 5


def test_a_slower_candidate_is_slower_and_a_budget_stops_the_rounds():
    log = []
    slower = compare(FakeRunner("base", [1.0] * 9, log), FakeRunner("cand", [2.0] * 9, log), 3)
    assert slower.verdict == "slower" and slower.rounds == 5
    stopped = compare(
        FakeRunner("base", [1.0] * 9, log),
        FakeRunner("cand", [0.5] * 9, log),
        3,
        more=lambda rounds_run: False,
    )
    assert stopped.rounds == 3 and not stopped.faster  # no interval of 90 % in 3 rounds


def test_gpu_windows_count_the_candidates_runs_only():
    class Key:
        def __init__(self, metric):
            self.source, self.metric = "gpu0", metric

    class Stats:
        def __init__(self, mean):
            self.mean = mean

    class FakeSampler:
        def __init__(self):
            self.calls = 0

        def collect(self, sample_now=False):
            self.calls += 1
            value = 90.0 if self.calls % 2 == 0 else 10.0  # begin, then base/cand alternate
            return {Key("utilization_percent"): Stats(value), Key("sm_activity_percent"): Stats(5)}

    log = []
    base = FakeRunner("base", [1.0, 1.0], log)
    cand = FakeRunner("cand", [1.0, 1.0], log)
    windows = GPUWindows(FakeSampler())

    result = compare(base, cand, rounds=2, gpu=windows, cap=2)

    # collect #1 begins; round 0: base (#2), cand (#3 -> 10); round 1: cand (#4 -> 90), base.
    assert result.gpu_utilization == 50.0 and result.sm_activity == 5.0


def test_compare_together_rotates_the_order_and_judges_each_against_the_same_baseline_runs():
    log: list[str] = []
    base = FakeRunner("base", [1.0, 2.0, 1.0], log)  # 100, 50, 100 examples/s
    fast = FakeRunner("fast", [0.5, 1.0, 0.5], log)  # 2x in every round
    same = FakeRunner("same", [1.0, 2.0, 1.0], log)  # the baseline's speed in every round

    fast_found, same_found = compare_together(base, [fast, same], rounds=3, cap=3)

    assert log == ["base", "fast", "same", "fast", "same", "base", "same", "base", "fast"]
    # Every side ran once, untimed, before the first timed run of any.
    assert base.rewarmed_after_runs == fast.rewarmed_after_runs == same.rewarmed_after_runs == [0]
    assert (fast_found.ratio, fast_found.rounds_won, same_found.ratio) == (2.0, 3, 1.0)
    assert fast_found.baseline_speeds == same_found.baseline_speeds == (100.0, 50.0, 100.0)
    # Each candidate's own speeds, round by round, so two candidates compare per round too.
    assert fast_found.speeds == (200.0, 100.0, 200.0)
    assert same_found.speeds == (100.0, 50.0, 100.0)
    assert not same_found.faster and same_found.verdict == "not shown faster"


class FailingRunner(FakeRunner):
    """Runs ``good`` times, then fails as a trial does (out of memory)."""

    def __init__(self, name, good, log):
        super().__init__(name, [1.0] * good, log)

    def run(self):
        if not self._seconds:
            raise TrialFailed("out of memory")
        return super().run()


def test_compare_together_drops_a_failing_candidate_and_times_the_rest_again():
    log: list[str] = []
    base = FakeRunner("base", [1.0] * 9, log)
    failing = FailingRunner("failing", 1, log)  # fails in round 1
    fast = FakeRunner("fast", [0.5] * 9, log)
    dropped = []

    found = compare_together(base, [failing, fast], rounds=3, cap=3, dropped=dropped.append)

    assert isinstance(found[0], TrialFailed) and str(found[0]) == "out of memory"
    assert dropped == [failing]
    # The rounds start again without it: the comparison holds only rounds without the failure.
    assert found[1].rounds == 3 and found[1].ratio == 2.0
    assert log.count("failing") == 1


def test_compare_together_gives_every_candidate_the_baselines_failure():
    log: list[str] = []
    base = FailingRunner("base", 1, log)
    fast, slow = FakeRunner("fast", [0.5] * 3, log), FakeRunner("slow", [2.0] * 3, log)

    found = compare_together(base, [fast, slow], rounds=3, cap=3, dropped=log.append)

    assert [str(result) for result in found] == ["out of memory", "out of memory"]
    assert "fast" in log and all(entry in ("base", "fast", "slow") for entry in log)
