"""The loss check on real inputs (tuning/training/replay.py): an unseeded shuffle, a random
augmentation in a map, noise sampled in a custom train_step, a two-input model fed a list, sample
weights and a dict of inputs. steps_per_execution keeps the arithmetic, so it must pass the
check on each; the clock is injected and charged known costs, so every decision is exact.
"""

from __future__ import annotations

from types import SimpleNamespace

import keras
import numpy as np
import pytest
from fakes import CostClock, charge_calls
from knob_driving import judged

from tfthroughput.tuning import tune
from tfthroughput.tuning.result import FASTER, REJECTED
from tfthroughput.tuning.training.data import training_data
from tfthroughput.tuning.training.replay import (
    FALSE_REJECTION,
    REPLAY_MAX_BYTES,
    T_QUANTILES,
    VARIATION_PASSES,
    Variation,
    loss_check,
    prediction_bound,
    replay_feed,
)

QUICK = {"steps": 16, "rounds": 2, "precision": False, "time_budget": 120, "xla": False}
# 4 ms a call, 0.5 ms a step: more steps per call is faster, exactly.
COSTS = {"launch": 0.004, "per_step": 0.0005}


def tiny_mlp(features: int = 8) -> keras.Model:
    model = keras.Sequential(
        [keras.Input((features,)), keras.layers.Dense(8), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


def arrays(examples: int = 256, features: int = 8):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, features)).astype("float32")
    return x, (x[:, :1] * 0.5 + 0.1).astype("float32")


def line_trials(result):
    return [
        t
        for t in result.trials[1:]
        if t.label.startswith("steps_per_execution=") and not t.setup.pipeline
    ]


def assert_line_kept_the_loss(result, basis):
    trials = line_trials(result)
    assert trials, str(result)
    for trial in trials:
        assert trial.status == FASTER, str(result)
        assert trial.loss_check.passed and trial.loss_check.basis == basis, str(result)
    assert result.chosen.steps_per_execution > 1


def charged(build, clock):
    return lambda: charge_calls(build(), clock, **COSTS)


@pytest.mark.tensorflow
def test_an_unseeded_shuffle_is_replayed_so_steps_per_execution_keeps_the_loss_exactly():
    import tensorflow as tf

    x, y = arrays()
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(8)
    # Two passes of the input differ: a check on each trial's own pass would compare them.
    first, second = (np.concatenate([b[0].numpy() for b in data]) for _ in range(2))
    assert not np.array_equal(first, second)
    clock = CostClock()
    result = tune(
        charged(tiny_mlp, clock),
        data,
        pipeline=False,
        max_steps_per_execution=4,
        clock=clock,
        **QUICK,
    )
    assert_line_kept_the_loss(result, "replayed")
    assert all(t.loss_check.relative_difference <= 1e-5 for t in line_trials(result))
    assert "ok: 0.0e+00 replayed" in str(result) or "replayed" in str(result)


@pytest.mark.tensorflow
def test_a_random_augmentation_in_map_is_replayed():
    import tensorflow as tf

    x, y = arrays()
    noisy = lambda a, b: (a + tf.random.uniform(tf.shape(a), -0.5, 0.5), b)  # noqa: E731
    data = tf.data.Dataset.from_tensor_slices((x, y)).map(noisy).batch(8)
    clock = CostClock()
    result = tune(
        charged(tiny_mlp, clock),
        data,
        pipeline=False,
        max_steps_per_execution=4,
        clock=clock,
        **QUICK,
    )
    assert_line_kept_the_loss(result, "replayed")


class NoisyStep(keras.Model):
    """A model whose own train_step samples noise, as a GAN's does: with a Keras seed
    generator (``keras_noise``), else TensorFlow's stateful ops, whose draws change once the
    step is traced in a loop of several steps."""

    def __init__(self, keras_noise: bool) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.keras_noise = keras_noise
        self.seed_generator = keras.random.SeedGenerator(7)

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        import tensorflow as tf

        x, y = data
        shape = tf.shape(x)
        if self.keras_noise:
            noise = keras.random.normal(shape, stddev=0.3, seed=self.seed_generator)
        else:
            noise = tf.random.normal(shape, stddev=0.3)
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x + noise, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
        return {"loss": loss}


def noisy_model(keras_noise: bool):
    def build():
        model = NoisyStep(keras_noise)
        model.compile(keras.optimizers.SGD(0.05), "mse")
        return model

    return build


@pytest.mark.tensorflow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a TensorFlow train_step")
def test_noise_from_a_seed_generator_in_train_step_keeps_the_loss_exactly():
    clock = CostClock()
    result = tune(
        charged(noisy_model(True), clock),
        arrays(),
        batch_size=8,
        pipeline=False,
        max_steps_per_execution=4,
        clock=clock,
        **QUICK,
    )
    assert_line_kept_the_loss(result, "replayed")


@pytest.mark.tensorflow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a TensorFlow train_step")
def test_stateful_noise_in_train_step_draws_alike_from_the_same_seed():
    clock = CostClock()
    result = tune(
        charged(noisy_model(False), clock),
        arrays(),
        batch_size=8,
        pipeline=False,
        max_steps_per_execution=4,
        clock=clock,
        **QUICK,
    )
    assert_line_kept_the_loss(result, "replayed")


@pytest.mark.tensorflow
def test_the_rebuilt_pipeline_on_an_unseeded_shuffle_is_held_to_the_measured_variation():
    import tensorflow as tf

    x, y = arrays()
    # sequential-map: lint finds a cost, so the pipeline is tried on its own pass of the input
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).map(lambda a, b: (a, b))
    clock = CostClock()
    result = tune(
        charged(tiny_mlp, clock), data.batch(8), max_steps_per_execution=2, clock=clock, **QUICK
    )
    rebuilt = [t for t in result.trials if t.setup.pipeline]
    assert rebuilt, str(result)
    check = rebuilt[0].loss_check
    assert check.basis == "measured" and check.tolerance > 1e-5 and check.passed, str(result)
    assert any("input's own variation measured over 5 fresh passes" in n for n in result.notes)
    assert "measured" in str(result)


def two_inputs() -> keras.Model:
    left, right = keras.Input((4,)), keras.Input((3,))
    joined = keras.layers.Concatenate()([keras.layers.Dense(4)(left), right])
    model = keras.Model([left, right], keras.layers.Dense(1)(joined))
    model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


@pytest.mark.tensorflow
def test_a_two_input_model_fed_a_list_reaches_every_knob():
    rng = np.random.default_rng(1)
    left = rng.normal(size=(256, 4)).astype("float32")
    right = rng.normal(size=(256, 3)).astype("float32")
    y = left[:, :1] - right[:, :1]
    clock = CostClock()
    result = tune(
        charged(two_inputs, clock),
        ([left, right], y),
        batch_size=8,
        max_steps_per_execution=4,
        clock=clock,
        **QUICK,
    )
    assert_line_kept_the_loss(result, "replayed")
    rebuilt = [t for t in result.trials if t.setup.pipeline]
    assert rebuilt and all(t.status != "failed" for t in rebuilt), str(result)
    assert all(t.loss_check.passed for t in rebuilt), str(result)


def test_sample_weights_and_a_dict_of_inputs_reach_the_line():
    rng = np.random.default_rng(2)
    x = {"a": rng.normal(size=(256, 4)).astype("float32")}
    y = x["a"][:, :1] * 2.0
    weights = np.linspace(0.5, 1.5, 256).astype("float32")

    def build():
        inputs = keras.Input((4,), name="a")
        model = keras.Model({"a": inputs}, keras.layers.Dense(1)(inputs))
        model.compile(keras.optimizers.SGD(0.05), "mse")
        return model

    clock = CostClock()
    result = tune(
        charged(build, clock),
        (x, y, weights),
        batch_size=8,
        pipeline=False,
        max_steps_per_execution=4,
        clock=clock,
        **QUICK,
    )
    assert_line_kept_the_loss(result, "replayed")
    assert training_data((x, y, weights), 8).sample_weight is weights


class WrongWhenLooped(keras.Model):
    """A model whose step does other math once several steps run per call: a real bug."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)

    def compute_loss(self, *args, **kwargs):
        loss = super().compute_loss(*args, **kwargs)
        return loss * 3.0 if self.steps_per_execution > 1 else loss


def test_a_real_divergence_is_still_rejected():
    clock = CostClock()

    def build():
        model = WrongWhenLooped()
        model.compile(keras.optimizers.SGD(0.05), "mse")
        return charge_calls(model, clock, **COSTS)

    result = tune(
        build,
        arrays(),
        batch_size=8,
        pipeline=False,
        max_steps_per_execution=2,
        clock=clock,
        **QUICK,
    )
    trial = line_trials(result)[0]
    assert trial.status == REJECTED and not trial.loss_check.passed, str(result)
    # Deterministic input and step: the measured variation is nil, the exact tolerance stays.
    assert trial.loss_check.tolerance == 1e-5
    assert result.chosen == result.baseline


@pytest.mark.tensorflow
def test_an_input_too_large_to_replay_is_read_pass_by_pass(monkeypatch):
    import tensorflow as tf

    from tfthroughput.tuning.training import replay as replaying

    x, y = arrays()
    data = training_data(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), None)
    monkeypatch.setattr(replaying, "REPLAY_MAX_BYTES", 1000)
    feed, why_not = replay_feed(data, None, 16)
    assert feed is None and why_not == "its first 16 batches would hold 0 MiB in memory"
    assert REPLAY_MAX_BYTES == 512 * 2**20


def measured_check(measured_tolerance: float, candidate_loss: float, centre: float = 1.0):
    settings = SimpleNamespace(loss_tolerance=0.05)
    variation = Variation(centre, measured_tolerance)
    workload = SimpleNamespace(settings=settings, measured_tolerance=variation)
    view = SimpleNamespace(base_runner=SimpleNamespace(warmup_loss=1.0))
    rebuilt = SimpleNamespace(pipeline=True, augment_on_device=False, batch_size=8)
    runner = SimpleNamespace(warmup_loss=candidate_loss)
    return judged(loss_check(workload, view, rebuilt, runner, same_arithmetic=True))


@pytest.mark.parametrize(
    "measured_tolerance, candidate_loss, tolerance, passed",
    [
        (0.012, 1.03, 0.05, True),  # an input varying little: held as precision is, at 5 %
        (0.012, 1.06, 0.05, False),  # 6 % off is beyond it: rejected
        (0.09, 1.08, 0.09, True),  # an input varying more than 5 %: its own variation holds
        (0.09, 1.10, 0.09, False),
        (0.0, 1.001, 1e-5, False),  # a deterministic input: the exact check stays
    ],
)
def test_a_changed_random_stream_is_held_to_the_measured_variation_or_the_loss_tolerance(
    measured_tolerance, candidate_loss, tolerance, passed
):
    check = measured_check(measured_tolerance, candidate_loss)
    assert check.tolerance == pytest.approx(tolerance)
    assert check.passed is passed


def test_the_measured_check_is_against_the_mean_of_the_passes_not_the_replayed_loss():
    # The baseline's replayed loss (1.0) is one draw; the mean of its passes (1.1) the centre.
    check = measured_check(0.09, 1.18, centre=1.1)
    assert check.basis == "measured" and check.baseline_loss == 1.1 and check.passed
    assert not measured_check(0.09, 1.21, centre=1.1).passed


def test_the_prediction_bound_is_students_for_one_more_draw():
    scipy_stats = pytest.importorskip("scipy.stats")
    for dof, quantile in T_QUANTILES.items():
        assert quantile == pytest.approx(scipy_stats.t.ppf(1 - FALSE_REJECTION / 2, dof), 1e-4)
    losses = [2.0, 2.2, 1.8, 2.1, 1.9, 2.0]
    half = T_QUANTILES[5] * np.std(losses, ddof=1) * np.sqrt(1 + 1 / 6)
    assert prediction_bound(losses) == pytest.approx((2.0, half / 2.0))
    # Non-finite losses are left out; fewer than two finite ones, or none varying: no bound.
    assert prediction_bound([2.0, 2.2, float("nan")]).tolerance == pytest.approx(
        T_QUANTILES[1] * np.std([2.0, 2.2], ddof=1) * np.sqrt(1.5) / 2.1
    )
    assert prediction_bound([2.0, float("inf")]) == (2.0, 0.0)
    assert prediction_bound([1.5] * 6) == (1.5, 0.0)
    assert prediction_bound([]).tolerance == 0.0


def pass_losses(rng, draws: int, shift: float = 0.0):
    """Losses over passes of a noisy input (mean 0.27, spread 0.01, as the unseeded shuffle's
    test input gives), and a candidate's, ``shift`` off their mean."""
    losses = rng.normal(0.27, 0.01, size=(draws, VARIATION_PASSES + 2))
    return losses[:, :-1], losses[:, -1] + shift


def false_rejections(passes, candidates) -> float:
    rejected = 0
    for losses, candidate in zip(passes, candidates, strict=True):
        centre, tolerance = prediction_bound(list(losses))
        rejected += abs(candidate - centre) / centre > tolerance
    return rejected / len(candidates)


def test_the_bound_rejects_one_in_200_that_keep_the_math_and_catches_a_real_change():
    rng = np.random.default_rng(0)
    # Normally spread losses, the candidate one more draw: FALSE_REJECTION of them outside.
    rate = false_rejections(*pass_losses(rng, 20_000))
    assert rate == pytest.approx(FALSE_REJECTION, abs=0.002)
    # A loss really changed by twice the bound's typical half-width (2 x 0.01 x 4.77 x 1.08):
    # caught nearly always, up or down.
    for shift in (0.105, -0.105):
        assert false_rejections(*pass_losses(rng, 2_000, shift)) > 0.9


def test_a_failure_reason_never_prints_the_users_arrays():
    from tfthroughput.tuning.engine.trial_model import failure_reason

    values = np.arange(12.0).reshape(3, 4)
    error = ValueError(f"Dimensions 2 and 1000 are not compatible: {values!r}")
    assert failure_reason(error, "train") == (
        "ValueError: Dimensions 2 and 1000 are not compatible: ..."
    )
    shapes = ValueError("Input 0 expects shape (None, 4), found shape [8, 3]")
    assert "[8, 3]" in failure_reason(shapes, "train")


@pytest.mark.tensorflow
def test_the_rebuilt_pipeline_keeps_a_list_of_inputs_as_several_inputs():
    import tensorflow as tf  # noqa: F401 - the pipeline knob is TensorFlow's

    from tfthroughput.tuning.training.pipeline import plan, rebuilt

    left, right = np.zeros((16, 4), "float32"), np.ones((16, 3), "float32")
    labeled = training_data(([left, right], left[:, :1]), 8)
    (x, y) = next(iter(rebuilt(labeled, plan(labeled), 8)))
    assert [tuple(part.shape) for part in x] == [(8, 4), (8, 3)] and tuple(y.shape) == (8, 1)
    unlabeled = training_data(([left, right], None), 8)
    (x,) = next(iter(rebuilt(unlabeled, plan(unlabeled), 8)))  # read by fit as x alone
    assert [tuple(part.shape) for part in x] == [(8, 4), (8, 3)]
    weighted = training_data((left, left[:, :1], np.ones(16, "float32")), 8)
    assert [tuple(t.shape) for t in next(iter(rebuilt(weighted, plan(weighted), 8)))] == [
        (8, 4),
        (8, 1),
        (8,),
    ]


def test_the_shuffled_passes_of_arrays_each_draw_their_own_order():
    from tfthroughput.tuning.training.replay import shuffled_feed

    x = np.arange(24.0).reshape(12, 2)
    feed = training_data((x, x[:, :1], np.arange(12.0)), 4).feed(4, 5)  # 20 of 12: repeated
    first, second = (shuffled_feed(feed, 12, seed) for seed in (1, 2))
    assert not np.array_equal(first["x"], second["x"]) and first["shuffle"] is False
    for part in (first["x"][:12], first["x"][12:]):  # each repetition: every example once
        assert sorted(part[:, 0]) == list(x[:, 0])
    assert np.array_equal(first["x"][:, :1], first["y"])  # rows stay together
    assert np.array_equal(first["x"][:, 0] / 2, first["sample_weight"])
    assert np.array_equal(shuffled_feed(feed, 12, 1)["x"], first["x"])
