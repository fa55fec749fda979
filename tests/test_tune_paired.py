"""The paired rule (tuning/engine/paired.py): the sign-test interval of the median ratio, its
verdicts, and the rule at work on real fits whose costs are charged to an injected clock
(``CostClock``, ``charge_calls``) under a load that ramps, swings or scatters."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from fakes import CostClock, charge_calls

from tfthroughput.tuning import tune
from tfthroughput.tuning.engine.measure import compare
from tfthroughput.tuning.engine.paired import (
    COVERAGE,
    MAX_ROUNDS,
    MIN_GAIN,
    NARROW,
    paired_ratio,
    settled,
    sign_test_rank,
)
from tfthroughput.tuning.result import FASTER
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training.fit_runner import FitRunner

QUICK = {"steps": 16, "rounds": 3, "precision": False, "time_budget": 300, "xla": False}


def test_the_sign_test_interval_covers_the_median_at_90_percent_or_more():
    assert sign_test_rank(4)[1] < COVERAGE  # min and max of 4 rounds: 87.5 %
    for rounds in range(5, 40):
        rank, coverage = sign_test_rank(rounds)
        assert coverage >= COVERAGE
        # one rank further in would fall below 90 %
        assert rank == rounds // 2 or sign_test_rank(rounds, coverage=coverage + 1e-9)[0] <= rank
    assert sign_test_rank(11) == (3, pytest.approx(1 - 2 * (1 + 11 + 55) / 2**11))


def test_verdicts_and_when_rounds_stop():
    assert paired_ratio([1.5] * 5).verdict == "faster"
    assert paired_ratio([1.5] * 4).verdict == "not shown faster"  # no 90 % interval yet
    assert paired_ratio([0.8] * 5).verdict == "slower"
    straddling = paired_ratio([0.9, 1.2, 1.0, 1.3, 1.1])
    assert straddling.verdict == "not shown faster" and not settled(straddling)
    assert settled(straddling, cap=5)  # at the cap: not shown faster, said so
    assert settled(paired_ratio([1.0, 1.01, 0.99, 1.0, 1.02]))  # narrow: within 7 %
    assert paired_ratio([1.0 + MIN_GAIN] * 5).verdict == "not shown faster"
    with pytest.raises(ValueError, match="Received: ratios=\\[\\]"):
        paired_ratio([])


def rounds_until(stop, ratios):
    """The verdict where ``stop`` ends a comparison of ``ratios``, and its rounds."""
    for count in range(5, len(ratios) + 1):
        found = paired_ratio(ratios[:count])
        if stop(found):
            return found.verdict, count
    raise AssertionError("the cap always stops")


def without_the_out_of_reach_stop(found) -> bool:
    """The rule before rounds stopped once faster was out of reach."""
    if len(found.ratios) >= MAX_ROUNDS:
        return True
    threshold = 1.0 + MIN_GAIN
    return found.half_width <= NARROW or found.low > threshold or found.high < threshold


def test_stopping_once_faster_is_out_of_reach_loses_no_verdict_of_faster():
    rng = np.random.default_rng(0)
    fewer = 0
    for _ in range(3000):
        # Medians around the threshold, scatter from none to wide: where stopping matters.
        ratios = list(rng.normal(rng.uniform(0.9, 1.2), rng.uniform(0.0, 0.2), MAX_ROUNDS))
        now, now_rounds = rounds_until(settled, ratios)
        before, before_rounds = rounds_until(without_the_out_of_reach_stop, ratios)
        assert (now == "faster") == (before == "faster"), ratios
        if now == "faster":
            assert now_rounds == before_rounds, ratios
        assert now_rounds <= before_rounds
        fewer += now_rounds < before_rounds
    assert fewer > 900  # it does stop sooner, often (1,086 of 3,000 with this seed)


def tiny_mlp() -> keras.Model:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def arrays():
    x = np.random.default_rng(0).normal(size=(128, 4)).astype("float32")
    return x, x[:, :1]


class Load:
    """A machine's load as a function of the clock: what each call costs is multiplied by it."""

    def __init__(self, clock: CostClock, shape) -> None:
        self.clock, self.shape = clock, shape

    def __call__(self) -> float:
        return self.shape(self.clock.now)


def charged(clock, load, *, launch, per_step, scatter=None):
    """Builds tiny MLPs whose calls cost ``(launch + per_step * steps) * load()``; ``scatter``
    (a function of the run's index) multiplies the cost of a candidate's (spe > 1) runs."""

    def build():
        model = tiny_mlp()

        def cost(model):
            factor = load()
            if scatter is not None and model.steps_per_execution > 1:
                factor *= scatter(int(model.optimizer.iterations.numpy()) // QUICK["steps"])
            return launch * factor

        return charge_calls(model, clock, launch=cost, per_step=lambda m: per_step * load())

    return build


def line_trial(result):
    return next(t for t in result.trials if t.label == "steps_per_execution=2")


def tune_line(build, clock):
    return tune(
        build,
        arrays(),
        batch_size=8,
        pipeline=False,
        max_steps_per_execution=2,
        clock=clock,
        **QUICK,
    )


def test_a_load_ramp_that_slows_both_sides_alike_does_not_flip_the_verdict():
    clock = CostClock()
    steady = tune_line(charged(clock, lambda: 1.0, launch=0.004, per_step=0.002), clock)
    clock = CostClock()
    ramp = Load(clock, lambda now: 1.0 + now / 2.0)  # 1x at the start, slower by 50 % a second
    ramped = tune_line(charged(clock, ramp, launch=0.004, per_step=0.002), clock)
    for result in (steady, ramped):
        assert line_trial(result).status == FASTER, str(result)
        assert result.chosen.steps_per_execution == 2
    assert line_trial(ramped).ratio == pytest.approx(line_trial(steady).ratio, rel=0.1)


def test_a_steady_gain_of_1_5x_under_a_2x_load_swing_is_picked():
    clock = CostClock()
    swing = Load(clock, lambda now: 2.0 if int(now / 1.5) % 2 else 1.0)  # 1x, 2x, every 1.5 s
    # 4 ms a call, 2 ms a step: two steps per call cost 8 ms against 12 ms, a 1.5x gain.
    result = tune_line(charged(clock, swing, launch=0.004, per_step=0.002), clock)
    trial = line_trial(result)
    assert trial.status == FASTER and trial.ratio == pytest.approx(1.5, rel=0.05), str(result)
    # The load swings whole runs of either side by 2x: each side's own spread is about 100 %.
    assert trial.ratio_low > 1 + MIN_GAIN
    assert result.chosen.steps_per_execution == 2 and result.speedup > 1.3


def test_a_candidate_whose_own_runs_scatter_is_not_picked():
    clock = CostClock()
    # Two steps a call halve the calls (2x), but the candidate's runs cost more or less, run
    # after run: 0.8x to 1.6x the baseline's speed, a third of the rounds lost. Its best rounds
    # alone would make it the pick.
    factors = [2 / ratio for ratio in (0.8, 1.6, 1.0, 1.4, 0.9, 1.3)]
    build = charged(
        clock, lambda: 1.0, launch=0.004, per_step=0.0, scatter=lambda run: factors[run % 6]
    )
    result = tune_line(build, clock)
    trial = line_trial(result)
    assert trial.status != FASTER, str(result)
    assert trial.ratio_low < 1 + MIN_GAIN < trial.ratio_high, str(result)
    assert result.chosen == result.baseline


def test_two_identical_setups_are_never_faster_under_a_scattering_load():
    clock = CostClock()
    rng = np.random.default_rng(3)
    load = lambda: float(rng.lognormal(0.0, 0.3))  # noqa: E731 - each call 0.5x to 2x
    build = charged(clock, load, launch=0.004, per_step=0.001)
    x, y = arrays()
    feed = {"x": np.concatenate([x] * 2), "y": np.concatenate([y] * 2), "batch_size": 8}
    setup = TuneSetup(1, False, "float32", batch_size=8)
    sides = [
        FitRunner(setup, build, feed, steps=16, examples_per_step=8, seed=0, clock=clock)
        for _ in range(2)
    ]
    for runner in sides:
        runner.start()
    try:
        verdicts = [compare(*sides, rounds=5).verdict for _ in range(8)]
    finally:
        for runner in sides:
            runner.close()
    assert "faster" not in verdicts, verdicts
