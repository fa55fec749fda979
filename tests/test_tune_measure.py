"""Alternated rounds and the noise rule of tune's measurement, on fake runners (no fit)."""

from __future__ import annotations

import pytest

from tfthroughput.tuning._measure import MIN_NOISE, GPUWindows, compare


class FakeRunner:
    """Returns the next of ``seconds`` per run and logs the order of runs."""

    def __init__(self, name, seconds, log, steps=10, examples_per_step=10):
        self.name, self._seconds, self._log = name, list(seconds), log
        self.steps, self.examples_per_step = steps, examples_per_step

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
    assert result.noise == MIN_NOISE  # a steady baseline: the floor
    assert result.faster


def test_a_gain_inside_the_baselines_own_spread_is_not_faster():
    log = []
    base = FakeRunner("base", [1.0, 1.5, 1.0], log)  # 100, 66.7, 100 examples/s: 33 % spread
    cand = FakeRunner("cand", [0.8, 1.2, 0.8], log)  # 1.25x in every round

    result = compare(base, cand, rounds=3)

    assert result.noise == pytest.approx((100 - 200 / 3) / 100)
    assert result.ratio == pytest.approx(1.25) and result.ratio_low > 1
    assert not result.faster


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
