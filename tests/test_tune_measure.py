"""Alternated rounds and the noise rule of tune's measurement, on fake runners (no fit)."""

from __future__ import annotations

import pytest

from tfthroughput.tuning._measure import (
    MIN_NOISE,
    GPUWindows,
    combined_noise,
    compare,
    compare_together,
)


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

    result = compare(base, cand, rounds=4)

    assert log == ["base", "cand", "cand", "base", "base", "cand", "cand", "base"]
    assert result.baseline_examples_per_second == 100.0
    assert (result.ratio_low, result.ratio, result.ratio_high) == (2.0, 2.0, 4.0)
    # A steady baseline, but the candidate's runs scatter from 200 to 400 examples/s: its
    # spread (200 / 200) is the noise, and a 2.0x median does not clear 1 + 1.0.
    assert result.noise == pytest.approx(1.0)
    assert not result.faster


def test_steady_runs_on_both_sides_leave_the_noise_floor():
    log = []
    result = compare(FakeRunner("base", [1.0] * 3, log), FakeRunner("cand", [0.5] * 3, log), 3)

    assert result.noise == MIN_NOISE and result.ratio == 2.0 and result.faster


def test_a_gain_inside_the_baselines_own_spread_is_not_faster():
    log = []
    base = FakeRunner("base", [1.0, 1.5, 1.0], log)  # 100, 66.7, 100 examples/s: 33 % spread
    cand = FakeRunner("cand", [0.8, 1.2, 0.8], log)  # 1.25x in every round

    result = compare(base, cand, rounds=3)

    # Both sides scatter by a third: the noise is their sum.
    assert result.noise == pytest.approx(2 * (100 - 200 / 3) / 100)
    assert result.ratio == pytest.approx(1.25) and result.ratio_low > 1
    assert not result.faster


def test_a_candidate_whose_own_runs_scatter_is_not_faster_on_a_steady_baseline():
    log = []
    base = FakeRunner("base", [1.0] * 5, log)  # 100 examples/s in every round: 0 % spread
    # 125, 167, 100, 125, 200 examples/s: a 1.25x median, 4 of 5 rounds won, but its own runs
    # spread over (200 - 100) / 125 = 80 %. The baseline's spread alone (the 3 % floor) would
    # call it faster.
    cand = FakeRunner("cand", [0.8, 0.6, 1.0, 0.8, 0.5], log)

    result = compare(base, cand, rounds=5)

    assert result.ratio == pytest.approx(1.25) and result.rounds_won == 4
    assert combined_noise([100.0] * 5, [125.0] * 5) == MIN_NOISE  # were its runs steady
    assert result.noise == pytest.approx(0.8)
    assert not result.faster


def test_a_gain_beyond_both_spreads_is_faster():
    log = []
    base = FakeRunner("base", [1.0, 1.1, 1.0, 1.0, 1.1], log)  # 100 or 90.9: 9 % spread
    cand = FakeRunner("cand", [0.5, 0.5, 0.55, 0.5, 0.5], log)  # 200 or 182: 9 % spread

    result = compare(base, cand, rounds=5)

    assert result.noise == pytest.approx(2 * (1 - 1 / 1.1))
    assert result.ratio > 1 + result.noise and result.faster


def test_one_round_lost_does_not_veto_but_most_rounds_lost_do():
    log = []
    base = FakeRunner("base", [1.0] * 6, log)
    one_lost = compare(base, FakeRunner("cand", [0.5, 1.1, 0.5], log), rounds=3)
    assert (one_lost.rounds_won, one_lost.rounds) == (2, 3) and one_lost.faster
    two_lost = compare(base, FakeRunner("cand", [0.2, 1.1, 1.1], log), rounds=3)
    assert two_lost.ratio < 1 and not two_lost.faster
    lucky = compare(
        FakeRunner("base", [1.0] * 4, log), FakeRunner("cand", [0.2, 0.2, 1.1, 1.1], log), 4
    )
    assert lucky.ratio > 1 + lucky.noise and not lucky.faster  # 2 of 4 is not more than half


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

    result = compare(base, cand, rounds=2, gpu=windows)

    # collect #1 begins; round 0: base (#2), cand (#3 -> 10); round 1: cand (#4 -> 90), base.
    assert result.gpu_utilization == 50.0 and result.sm_activity == 5.0


def test_compare_together_rotates_the_order_and_judges_each_against_the_same_baseline_runs():
    log: list[str] = []
    base = FakeRunner("base", [1.0, 2.0, 1.0], log)  # 100, 50, 100 examples/s
    fast = FakeRunner("fast", [0.5, 1.0, 0.5], log)  # 2x in every round
    same = FakeRunner("same", [1.0, 2.0, 1.0], log)  # the baseline's speed in every round

    fast_found, same_found = compare_together(base, [fast, same], rounds=3)

    assert log == ["base", "fast", "same", "fast", "same", "base", "same", "base", "fast"]
    # Every side ran once, untimed, before the first timed run of any.
    assert base.rewarmed_after_runs == fast.rewarmed_after_runs == same.rewarmed_after_runs == [0]
    assert (fast_found.ratio, fast_found.rounds_won, same_found.ratio) == (2.0, 3, 1.0)
    assert fast_found.baseline_speeds == same_found.baseline_speeds == (100.0, 50.0, 100.0)
    # Each candidate's own speeds, round by round, so two candidates compare per round too.
    assert fast_found.speeds == (200.0, 100.0, 200.0)
    assert same_found.speeds == (100.0, 50.0, 100.0)
    assert fast_found.noise == pytest.approx(0.5 + 0.5)  # both sides spread by 50 %
    assert not same_found.faster
