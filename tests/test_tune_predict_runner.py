"""tuning/inference/predict_runner.py: an inference trial's runner on a tiny model whose every
``predict`` function call costs a known time on a fake clock (``fakes.charge_calls``), so its
warm-up, its timed runs (from the second execution, scaled to ``steps`` batches), its latency
samples and a whole call's seconds are exact."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
from fakes import FakeClock, charge_calls
from tiny_models import float32_policy  # noqa: F401 - fixture

from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.inference.data import inference_data
from tfthroughput.tuning.inference.predict_runner import (
    LATENCY_SAMPLES,
    MOST_LATENCY_SAMPLES,
    PredictRunner,
    _FromExecution,
    percentile,
)
from tfthroughput.tuning.setup import TuneSetup

LAUNCH, PER_STEP = 0.010, 0.001  # seconds per predict function call, and per batch it runs
X = np.arange(30, dtype="float32").reshape(10, 3)

pytestmark = pytest.mark.usefixtures("float32_policy")


def runner(setup=None, *, steps=8, launch=LAUNCH, inputs=3, batch_size=4):
    clock = FakeClock()

    def build():
        model = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(2)])
        model.compile(jit_compile=False)  # as given without XLA on every backend (JAX: "auto")
        return charge_calls(model, clock, launch=launch, per_step=PER_STEP, kind="predict")

    data = inference_data(X, batch_size)
    made = PredictRunner(setup, build, data, steps=steps, warmup_steps=2, seed=0, clock=clock)
    return made, clock


def test_percentile_is_linear_between_the_closest_ranks():
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5  # unsorted: sorted first
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    assert percentile([5.0, 1.0, 2.0], 0.0) == 1.0 and percentile([5.0, 1.0, 2.0], 1.0) == 5.0


def test_the_timer_starts_once_at_the_first_execution_it_is_given():
    clock = FakeClock()
    timer = _FromExecution(clock, first=2)
    timer.on_predict_batch_begin(0)
    assert timer.start is None
    clock.advance(1.5)
    timer.on_predict_batch_begin(2)
    clock.advance(1.0)
    timer.on_predict_batch_begin(4)
    assert (timer.start, timer.timed_from) == (1.5, 2)


def test_the_model_as_given_starts_with_its_setup_outputs_and_warm_up():
    trial, _ = runner()
    trial.start()

    assert trial.setup == TuneSetup(1, False, "float32", batch_size=4)
    assert trial.examples_per_step == 4
    # The outputs of the check examples (all 10), from the trial's own model.
    assert trial.reference is trial.outputs and trial.outputs.shape == (10, 2)
    np.testing.assert_array_equal(trial.outputs, trial.model.predict(X, batch_size=4, verbose=0))
    # Warm-up: 2 batches, one predict_on_batch, then 3 batches for the check: 6 calls.
    assert trial.warmup_seconds == pytest.approx(6 * (LAUNCH + PER_STEP))
    assert trial.latencies == [] and trial.latency_ms(0.5) is None


def test_a_timed_run_skips_the_first_execution_and_scales_to_steps():
    trial, _ = runner(steps=8)
    trial.start()
    # 7 timed calls of one batch, scaled to 8 batches.
    assert trial.run() == pytest.approx(8 * (LAUNCH + PER_STEP))
    trial.set_steps(4)
    assert trial.run() == pytest.approx(4 * (LAUNCH + PER_STEP))
    trial.close()
    assert trial.model is None

    grouped, _ = runner(TuneSetup(2, False, "float32", batch_size=4), steps=8)
    grouped.start()
    assert grouped.model.steps_per_execution == 2
    # Warm-up: 2 executions, one predict_on_batch, the 3 check batches in 2 executions.
    assert grouped.warmup_seconds == pytest.approx(5 * (LAUNCH + 2 * PER_STEP))
    # 4 calls of 2 batches; the last 3 are timed (6 batches), scaled to 8 batches.
    assert grouped.run() == pytest.approx(4 * (LAUNCH + 2 * PER_STEP))


def test_a_run_of_one_execution_cannot_be_timed():
    trial, _ = runner(TuneSetup(4, False, "float32", batch_size=4), steps=4)
    trial.start()
    with pytest.raises(TrialFailed, match=r"^predict ran fewer than 4 batches$"):
        trial.run()


def test_latency_is_sampled_before_each_round_until_the_runner_holds_enough():
    trial, _ = runner()
    trial.start()
    held = []
    for _ in range(8):
        trial.before_round()
        held.append(len(trial.latencies))
    # 5 single-batch calls before each of the first 5 rounds, none after: a heavy model's
    # rounds are not spent on more of them.
    assert held == [5, 10, 15, 20, 25, 25, 25, 25] and MOST_LATENCY_SAMPLES == 25


def test_latency_samples_are_single_batch_calls_and_their_quantiles():
    costs = itertools.chain([LAUNCH] * 6, [0.004, 0.001, 0.005, 0.002, 0.003])
    trial, _ = runner(launch=lambda model: next(costs))
    trial.start()  # the warm-up's 6 calls
    trial.before_round()

    assert len(trial.latencies) == LATENCY_SAMPLES
    assert trial.latency_ms(0.5) == pytest.approx(1000 * (0.003 + PER_STEP))
    assert trial.latency_ms(0.95) == pytest.approx(1000 * (0.0048 + PER_STEP))
    figures = trial.figures()
    assert figures["latency_p50_ms"] == pytest.approx(4.0)
    assert figures["latency_p95_ms"] == pytest.approx(5.8)
    assert figures["warmup_seconds"] == pytest.approx(6 * (LAUNCH + PER_STEP))
    assert (figures["memory_mib"], figures["reason"]) == (None, "")  # no device memory on CPU


def test_a_whole_call_times_the_call_and_counts_its_examples():
    trial, clock = runner()
    trial.start()
    feed, whole = trial._data.whole_feed(4, most=1e9)
    assert whole
    before = clock()
    seconds, examples = trial.whole_call(feed)
    # 10 examples in batches of 4: 3 calls.
    assert (seconds, examples) == (pytest.approx(3 * (LAUNCH + PER_STEP)), 10)
    assert clock() - before == pytest.approx(seconds)


def test_a_model_that_cannot_predict_the_data_fails_the_trial_with_a_reason():
    trial, _ = runner(inputs=5)  # the data has 3 features
    # Keras's error, by its type and first line, ends the trial: not raised to the search.
    with pytest.raises(TrialFailed, match=r"^ValueError: \S") as raised:
        trial.start()
    assert "\n" not in str(raised.value) and isinstance(raised.value.__cause__, ValueError)
