"""tune(..., mode="inference"): the knobs' order, the output check, the latency limit, the
baseline kept, its arguments.

No timing verdicts: the search runs on fake runners with known costs (seconds per batch from
a formula, ``tests/predict_costs.py``), and the real ``predict`` path runs on a model whose
layer advances an injected clock by a known cost per batch, so every ratio and latency is
exact. The workload's parts one by one are in tests/test_tune_inference_workload.py; real
speed-ups are shown by benchmarks/tune.py.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from predict_costs import FakePredictRunner, KnownCost, search

from tfthroughput.precision.precision_recommendation import DeviceDescription, recommend_precision
from tfthroughput.tuning import InferenceTuneResult, tune
from tfthroughput.tuning.engine.verdict import (
    BASELINE,
    FAILED,
    FASTER,
    NOT_FASTER,
    OUTPUTS_DIFFER,
    OVER_LATENCY,
)
from tfthroughput.tuning.setup import TuneSetup

# ----------------------------------------------------------------- the search, on known costs


class XlaSlowsBfloat16(KnownCost):
    """XLA halves float32's cost per example and doubles bfloat16's; bfloat16 without XLA
    costs a quarter of float32's (a CPU whose XLA compiles bfloat16 poorly)."""

    def per_example_of(self, setup):
        if setup.policy == "mixed_bfloat16":
            return self.per_example * (2.0 if setup.jit_compile else 0.25)
        return super().per_example_of(setup)


def test_a_policy_slowed_by_the_flipped_xla_is_tried_with_xla_as_given():
    result = search(XlaSlowsBfloat16(launch=1e-4, per_example=1e-5), policy="mixed_bfloat16")

    by_label = {t.label: t for t in result.trials}
    chosen = result.chosen
    assert (chosen.policy, chosen.jit_compile) == ("mixed_bfloat16", False), str(result)
    on_xla = by_label[chosen.with_(jit_compile=True).changes_from(result.baseline)]
    assert on_xla.ratio < result.chosen_trial.ratio  # tried first, on the XLA best, and slower
    # bfloat16 without XLA against XLA's float32: a quarter of the cost per example, not a half
    xla_best = by_label[on_xla.setup.with_(policy="float32").changes_from(result.baseline)]
    assert result.chosen_trial.ratio > 1.5 * xla_best.ratio


def test_launch_bound_predict_tries_batch_then_xla_then_steps_per_execution_in_order():
    result = search(KnownCost(launch=1e-3, per_example=1e-6), examples=2048, limit=1.3)

    assert [t.label for t in result.trials][1:] == [
        "batch_size=64",
        "batch_size=128",
        "batch_size=256",
        "batch_size=512",  # 1.512 ms per batch: over the limit, the doubling ends
        "XLA on, batch_size=256",
        "steps_per_execution=2, XLA on, batch_size=256",
        "steps_per_execution=4, XLA on, batch_size=256",
        "steps_per_execution=8, XLA on, batch_size=256",  # a predict call: 2048 / 256 batches
    ]
    statuses = [t.status for t in result.trials]
    assert statuses == [BASELINE] + [FASTER] * 3 + [OVER_LATENCY] + [FASTER] * 4
    assert result.chosen == TuneSetup(8, True, "float32", batch_size=256)
    # 32 examples per 1.032 ms against 256 per (0.125 + 0.128) ms: 8.0x.
    assert result.speedup == pytest.approx((256 / 0.253e-3) / (32 / 1.032e-3))
    chosen = result.chosen_trial
    assert chosen.latency_p50_ms == pytest.approx(1.128)  # spe leaves one batch's latency
    # steps_per_execution is matched exactly against the setup it was added to; XLA and the
    # batch against the baseline, within the tolerance.
    assert chosen.output_check.same_arithmetic and chosen.output_check.tolerance == 1e-6
    assert not result.trials[5].output_check.same_arithmetic
    assert result.trials[0].latency_p95_ms == pytest.approx(1.032)
    assert result.predict_kwargs == {"batch_size": 256}
    assert result.compile_kwargs == {"steps_per_execution": 8, "jit_compile": True}
    assert "predictions = model.predict(x, batch_size=256)" in result.snippet
    assert "SavedModel" in result.snippet


def test_steps_per_execution_goes_up_to_one_execution_per_predict_call():
    # 256 examples: the batch line ends at all of them, one batch per call: nothing to group.
    result = search(KnownCost(launch=1e-3, per_example=1e-6), examples=256)

    assert [t.label for t in result.trials][-1] == "XLA on, batch_size=256"
    assert "batch size bounded by the 256 examples in the data" in result.notes
    assert (
        "steps_per_execution above 1 not tried: one predict call on the 256 examples is 1 "
        "batch of 256"
    ) in result.notes
    # 160 examples at the given 32 (64 is over the latency limit): a call of 5 batches runs
    # in one execution at 8, the last value tried.
    result = search(KnownCost(launch=1e-3, per_example=1e-6), examples=160, limit=1.05, xla=False)

    spe = [t.setup.steps_per_execution for t in result.trials if t.setup.batch_size == 32]
    assert spe == [1, 2, 4, 8]


def test_outputs_beyond_the_tolerance_are_rejected_even_when_faster():
    t4 = recommend_precision([DeviceDescription("GPU", "Tesla T4", (7, 5))]).policy
    drift = lambda setup: (  # noqa: E731
        0.05 if setup.policy != "float32" else 1e-5 if setup.steps_per_execution > 1 else 0.0
    )
    # 128 examples, batch 64 (128 is over the latency limit): a call of 2 batches to group.
    result = search(KnownCost(1e-3, 1e-6, drift), examples=128, limit=1.1, policy=t4)

    by_label = {t.label: t for t in result.trials}
    spe = by_label["steps_per_execution=2, XLA on, batch_size=64"]
    # 1e-5 where the outputs must not change at all: against the setup it was added to.
    assert spe.status == OUTPUTS_DIFFER and spe.output_check.same_arithmetic
    policy = by_label["XLA on, policy=mixed_float16, batch_size=64"]
    assert policy.status == OUTPUTS_DIFFER and policy.ratio_low > 1.03
    assert policy.output_check.max_abs_difference == pytest.approx(0.05)
    assert policy.output_check.max_rel_difference == pytest.approx(0.05)
    assert "DIFFER" in str(policy.output_check)
    assert result.chosen == TuneSetup(1, True, "float32", batch_size=64)


def test_steps_per_execution_alone_must_keep_the_outputs_exactly():
    drift = lambda setup: 1e-5 if setup.steps_per_execution > 1 else 0.0  # noqa: E731
    # 64 examples at the given 32 (64 is over the latency limit): a call of 2 batches.
    result = search(KnownCost(1e-3, 1e-6, drift), examples=64, limit=1.05, xla=False)

    spe = result.trials[2]
    assert spe.label == "steps_per_execution=2"
    assert spe.output_check.same_arithmetic and spe.output_check.tolerance == 1e-6
    assert spe.status == OUTPUTS_DIFFER and not result.improved


def test_the_latency_limit_bounds_the_batch():
    result = search(KnownCost(1e-3, 1e-6), limit=1.2, xla=False)

    labels = [t.label for t in result.trials]
    assert labels[1:4] == ["batch_size=64", "batch_size=128", "batch_size=256"]
    over = result.trials[3]
    assert over.status == OVER_LATENCY and over.latency_p95_ms == pytest.approx(1.256)
    assert over.ratio_low > 1.03  # faster, but over the limit: never chosen
    assert result.chosen.batch_size == 128
    assert all(t.setup.batch_size <= 128 for t in result.trials[4:])
    assert (
        "batch size bounded by the latency limit: 256 takes 1.26 ms per batch (p95), over 1.2 ms"
    ) in result.notes
    assert "latency limit 1.2 ms per batch (p95)" in str(result)


def test_a_baseline_over_the_latency_limit_gets_no_larger_batch():
    result = search(KnownCost(1e-3, 1e-6), limit=0.5, xla=False)

    assert all(t.setup.batch_size == 32 for t in result.trials)
    assert any("already exceeds the limit (0.5 ms)" in note for note in result.notes)


class ScatteredRuns(KnownCost):
    """Known costs, but a setup with ``steps_per_execution`` > 1 takes 0.8, 1.0 and 1.25 times
    its time in turn, run after run: its median is its cost, its rounds scatter by a half."""

    def runner(self, setup, build_model, data, *, steps, warmup_steps, seed, clock):
        return ScatteredRunner(self, setup, data, steps)


class ScatteredRunner(FakePredictRunner):
    _FACTORS = (0.8, 1.0, 1.25)

    def run(self):
        seconds = super().run()
        if self.setup.steps_per_execution == 1:
            return seconds
        self._runs = getattr(self, "_runs", -1) + 1
        return seconds * self._FACTORS[self._runs % len(self._FACTORS)]


def test_a_higher_ratio_within_the_noise_does_not_carry_a_line_on():
    # 0.1 ms a call, 10 us an example, batch 32 (64 is over the 0.5 ms limit): 2 and 4 steps
    # per call are 1.14x and 1.22x, but their rounds scatter by half: within the noise.
    result = search(ScatteredRuns(1e-4, 1e-5), examples=1024, limit=0.5, xla=False)

    line = [t for t in result.trials if t.setup.steps_per_execution > 1]
    assert [(t.setup.steps_per_execution, t.status) for t in line] == [
        (2, NOT_FASTER),
        (4, NOT_FASTER),  # the second value in a row without a gain: the line ends
    ]
    # By ratios alone 4 beat 2 by more than 3 %, and the line would have gone on to 32.
    assert line[1].ratio > 1.03 * line[0].ratio
    assert line[0].ratio == pytest.approx((0.42 / 0.37), rel=1e-6)
    assert not result.improved


def test_when_nothing_helps_the_baseline_is_kept_and_the_result_says_so():
    # No launch cost: every batch size, XLA... costs the same per example (XLA halves it, so
    # it is switched off here), and steps_per_execution saves nothing.
    result = search(KnownCost(0.0, 1e-5), xla=False)

    assert not result.improved and result.chosen == result.baseline
    assert [t.label for t in result.trials][1:] == [
        "batch_size=64",
        "batch_size=128",  # two doublings without a gain: the line stops
        "steps_per_execution=2",
        "steps_per_execution=4",
    ]
    assert all(t.status == NOT_FASTER for t in result.trials[1:])
    assert result.speedup == 1.0
    text = str(result)
    assert "chosen: the baseline, as given: nothing beat it outside the noise" in text
    assert result.snippet.splitlines()[1] == (
        "model.compile(..., steps_per_execution=1, jit_compile=False)  # or result.apply(model)"
    )


# ----------------------------------------------------------------- the real predict path


class CostClock:
    """A clock that only the model moves: ``advance`` is called from inside ``predict``."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def known_cost_builder(clock, launch, per_example):
    import tensorflow as tf

    class Costly(keras.layers.Layer):
        """Advances ``clock`` by the batch's known cost (a host call: XLA cannot compile it)."""

        def call(self, inputs):
            def pay(batch):
                clock.advance(launch + per_example * len(batch))
                return batch

            out = tf.numpy_function(pay, [inputs], tf.float32)
            return tf.ensure_shape(out, inputs.shape)

    def build():
        return keras.Sequential(
            [
                keras.Input((8,)),
                Costly(dtype="float32"),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(3),
            ]
        )

    return build


@pytest.fixture
def float32_policy():
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy(before)


@pytest.mark.tensorflow
def test_real_predict_with_known_costs_latency_limit_and_output_check(float32_policy, tmp_path):
    clock = CostClock()
    build = known_cost_builder(clock, launch=0.010, per_example=0.0001)
    x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
    t4 = recommend_precision([DeviceDescription("GPU", "Tesla T4", (7, 5))])

    result = tune(
        build,
        x,
        mode="inference",
        batch_size=64,
        steps=8,
        rounds=2,
        time_budget=1e6,
        precision=t4,
        max_batch_latency_ms=30,
        output_tolerance=1e-6,
        clock=clock,
        log_dir=str(tmp_path),
    )

    assert isinstance(result, InferenceTuneResult)
    assert [(t.label, t.status) for t in result.trials] == [
        ("as given: steps_per_execution=1, XLA off, float32, batch 64", BASELINE),
        ("batch_size=128", FASTER),
        ("batch_size=256", OVER_LATENCY),  # 10 + 25.6 ms per batch
        ("XLA on, batch_size=128", FAILED),
        ("steps_per_execution=2, batch_size=128", FASTER),  # than the baseline, not the best
        ("steps_per_execution=4, batch_size=128", FASTER),  # two without a gain: the line ends
        ("policy=mixed_float16, batch_size=128", OUTPUTS_DIFFER),
    ]
    assert "XLA" in result.trials[3].reason, result.trials[3].reason
    latencies = [t.latency_p50_ms for t in result.trials[:3]]
    assert latencies == pytest.approx([16.4, 22.8, 35.6])
    assert result.chosen == TuneSetup(1, False, "float32", batch_size=128)
    # 128 examples per 22.8 ms against 64 per 16.4 ms.
    assert result.speedup == pytest.approx((128 / 22.8) / (64 / 16.4))
    spe = result.trials[4]
    assert spe.ratio == pytest.approx(result.speedup)  # it changes nothing here
    assert spe.output_check.same_arithmetic and spe.output_check.max_abs_difference == 0.0
    assert result.trials[6].output_check.max_rel_difference > 1e-6
    assert keras.config.dtype_policy().name == "float32"
    written = list(tmp_path.iterdir())
    assert len(written) == 1 and written[0].name.startswith("events.out.tfevents")


def test_bad_arguments_name_the_argument():
    x = np.zeros((64, 8), "float32")
    build = lambda: keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])  # noqa: E731
    with pytest.raises(ValueError, match=r'`mode` must be "training" or "inference"'):
        tune(build, x, mode="serving")
    with pytest.raises(ValueError, match=r'`allow_batch_change` applies to mode="training"'):
        tune(build, x, mode="inference", allow_batch_change=True)
    with pytest.raises(ValueError, match=r'`strategy` applies to mode="training" only'):
        tune(build, x, mode="inference", strategy=object())
    with pytest.raises(ValueError, match=r'`max_batch_latency_ms` applies to mode="inference"'):
        tune(build, (x, x), max_batch_latency_ms=5)
    with pytest.raises(ValueError, match=r"Received: max_batch_latency_ms=0"):
        tune(build, x, mode="inference", max_batch_latency_ms=0)
    with pytest.raises(TypeError, match=r"Received: max_batch_latency_ms='5'"):
        tune(build, x, mode="inference", max_batch_latency_ms="5")
    with pytest.raises(ValueError, match=r"`output_tolerance` must be a number between 0 and 1"):
        tune(build, x, mode="inference", output_tolerance=2)
    with pytest.raises(TypeError, match=r"`pipeline` must be a bool. Received: pipeline='no'"):
        tune(build, x, mode="inference", pipeline="no")  # checked alike in both modes
    with pytest.raises(TypeError, match=r"`data` must be what model.predict takes"):
        tune(build, "images/", mode="inference")
    with pytest.raises(ValueError, match=r"`batch_size` must not exceed the 64 examples"):
        tune(build, x, mode="inference", batch_size=128)
    with pytest.raises(TypeError, match=r"`build_model` must return a keras.Model"):
        tune(lambda: "model.keras", x, mode="inference", time_budget=5)


@pytest.mark.tensorflow
def test_a_batched_dataset_keeps_its_batches_and_a_known_cost_model_keeps_the_baseline(
    float32_policy,
):
    import tensorflow as tf

    clock = CostClock()
    # Cost per example only: no knob changes it, so nothing may beat the baseline.
    build = known_cost_builder(clock, launch=0.0, per_example=0.001)
    x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(16)

    result = tune(
        build,
        dataset,
        mode="inference",
        steps=8,
        rounds=2,
        time_budget=1e6,
        precision=False,
        clock=clock,
    )

    assert [(t.label, t.status) for t in result.trials] == [
        ("as given: steps_per_execution=1, XLA off, float32", BASELINE),
        ("XLA on", FAILED),
        ("steps_per_execution=2", NOT_FASTER),
        ("steps_per_execution=4", NOT_FASTER),
    ]
    assert result.trials[0].examples_per_second == pytest.approx(1000.0)
    assert result.trials[0].latency_p50_ms == pytest.approx(16.0)  # 16 examples, 1 ms each
    assert not result.improved and result.predict_kwargs == {}
    assert result.notes[1].startswith("batch size not tried: the dataset is already batched")
    assert "nothing beat it outside the noise" in str(result)


@pytest.mark.tensorflow
def test_the_confirmation_times_whole_predict_calls_set_up_included(float32_policy):
    clock = CostClock()
    layers = known_cost_builder(clock, launch=0.010, per_example=0.0001)

    class SetUpCost(keras.Sequential):
        """predict's own set-up per call (data adapter, iterator) as a known 5 s: the search
        times from a call's second execution, the user's call pays it."""

        def predict(self, *args, **kwargs):
            clock.advance(5.0)
            return super().predict(*args, **kwargs)

    build = lambda: SetUpCost(layers().layers)  # noqa: E731
    x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")

    result = tune(
        build,
        x,
        mode="inference",
        batch_size=64,
        steps=8,
        rounds=2,
        time_budget=1e6,
        precision=False,
        clock=clock,
    )

    # The search: batch 512 at 2.14x (512 per 61.2 ms against 64 per 16.4 ms).
    pick = result.confirmation.pick
    assert pick == TuneSetup(1, False, "float32", batch_size=512), str(result)
    assert max(t.ratio for t in result.trials[1:] if t.status == FASTER) == pytest.approx(
        (512 / 61.2) / (64 / 16.4)
    )
    # Whole calls on the 512 examples: 5.1312 s against 5.0612 s (1.01x), and batch 256
    # 5.0712 s: inside the 3 % floor, so the baseline is kept and the headline says 1.00x.
    assert result.confirmation.work == (
        "whole predict calls on the data as given (512 examples, set-up included)"
    )
    assert result.chosen == result.baseline and result.speedup == 1.0
    assert result.predict_kwargs == {"batch_size": 64}
    assert result.confirmation.outcome == (
        "confirmation: the search's pick, batch_size=512, was 1.01x [1.01-1.01] (median of 5 "
        "rounds, 94% interval), 5 of 5 rounds won, not shown faster; the next-best, "
        "batch_size=256, was 1.01x [1.01-1.01] (median of 5 rounds, 94% interval), 5 of 5 rounds "
        "won, not shown faster: the baseline is kept"
    )
    assert "chosen: the baseline, as given: nothing beat it beyond the noise by whole" in str(
        result
    )
