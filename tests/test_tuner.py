"""tune() on real fits: its decisions on launch-bound, input-bound, compute-bound and failing
models, the time budget, and its argument checks.

No timing statistic decides a test: tune reads the injected ``clock``, and the tests charge
it known costs (each train-function call costs a fixed launch time plus a time per step it
runs; a slow input map costs a fixed time per batch), so each ratio, and each decision, is
exact. The real speed-ups are shown side by side by benchmarks/tune.py. The tests marked
``tensorflow`` need TensorFlow; the others re-run under Keras's JAX backend with TensorFlow
blocked (tests/test_tune_backends.py).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from fakes import CostClock, charge_calls

from tfthroughput.precision.precision_recommendation import DeviceDescription, recommend_precision
from tfthroughput.tuning import TuneResult, tune
from tfthroughput.tuning._settings import _callback_bound
from tfthroughput.tuning.result import BASELINE, FAILED, FASTER, NOT_FASTER

QUICK = {"steps": 32, "rounds": 3, "precision": False, "time_budget": 120}


def tiny_mlp(features: int = 16) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def arrays(examples: int = 1024, features: int = 16):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, features)).astype("float32")
    return x, (x[:, :1] * 0.5).astype("float32")


@pytest.fixture
def float32_policy():
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy(before)


def charged_mlp(clock: CostClock, *, launch: float, per_step: float):
    """A builder of tiny MLPs whose train-function calls cost known times on ``clock``."""
    return lambda: charge_calls(tiny_mlp(), clock, launch=launch, per_step=per_step)


def test_launch_bound_tiny_model_gets_more_steps_per_execution_with_the_same_loss():
    clock = CostClock()
    # 4 ms a call, 0.5 ms a step: 32 steps cost 144 ms one per call, 32 ms eight per call.
    result = tune(
        charged_mlp(clock, launch=0.004, per_step=0.0005),
        arrays(),
        batch_size=8,
        xla=False,
        pipeline=False,
        max_steps_per_execution=8,
        clock=clock,
        **QUICK,
    )

    assert isinstance(result, TuneResult)
    assert result.improved, str(result)
    assert result.chosen.steps_per_execution == 8
    # Each doubling gained beyond the 3 % a line needs to go on: 144/80, 144/48, 144/32.
    ratios = {t.label: t.ratio for t in result.trials[1:]}
    assert ratios == {
        "steps_per_execution=2": pytest.approx(1.8),
        "steps_per_execution=4": pytest.approx(3.0),
        "steps_per_execution=8": pytest.approx(4.5),
    }
    chosen = result.chosen_trial
    assert chosen.status == FASTER
    assert chosen.noise == pytest.approx(0.03)  # equal rounds: the noise floor
    assert chosen.rounds_won == QUICK["rounds"]
    assert chosen.loss_check.same_arithmetic and chosen.loss_check.passed
    assert chosen.loss_check.relative_difference <= 1e-5
    assert result.compile_kwargs == {
        "steps_per_execution": 8,
        "jit_compile": result.baseline.jit_compile,
    }
    assert result.trials[0].status == BASELINE
    assert result.trials[0].examples_per_second == pytest.approx(32 * 8 / 0.144)
    assert "steps_per_execution=8" in str(result)


@pytest.mark.tensorflow
def test_input_bound_pipeline_gets_the_rebuilt_pipeline():
    import tensorflow as tf

    clock = CostClock()

    def slow(x, y):  # a sequential Python step, 4 ms per batch: the input is the limit
        def wait(value):
            clock.advance(0.004)
            return value

        return tf.numpy_function(wait, [x], tf.float32), y

    x, y = arrays(256)
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(8)
        .map(lambda a, b: slow(a, b))
        .map(lambda a, b: (tf.ensure_shape(a, [None, 16]), b))
    )
    result = tune(
        charged_mlp(clock, launch=0.0005, per_step=0.0005),
        dataset,
        xla=False,
        max_steps_per_execution=1,
        clock=clock,
        **QUICK,
    )

    assert result.chosen.pipeline, str(result)
    assert result.pipeline_kwargs == {
        "batch_size": None,
        "cache": True,
        "deterministic": True,
        "repeat": True,
    }
    # A step costs 1 ms on the model and 4 ms in the map, which the cache (filled before the
    # timed runs) skips: about 5x. tf.data may run the map a batch or two ahead of the fit
    # loop, into the next run, so the ratios are not exact; the decisions are.
    chosen = result.chosen_trial
    assert chosen.status == FASTER and 3.0 < chosen.ratio < 8.0, str(result)
    assert chosen.loss_check.passed
    assert chosen.loss_check.same_arithmetic
    (probe,) = [t for t in result.trials if t.status == "probe"]
    assert 3.0 < probe.ratio < 8.0, str(result)
    assert "tfthroughput.build_pipeline(data, batch_size=None, cache=True" in result.snippet


def test_compute_bound_model_keeps_the_baseline_and_says_so():
    clock = CostClock()
    # 1 ms a call against 100 ms a step: two steps per call save 0.5 %, inside the 3 % noise
    # floor (4 steps cost 404 ms one per call, 402 ms two per call).
    result = tune(
        charged_mlp(clock, launch=0.001, per_step=0.1),
        arrays(),
        batch_size=8,
        steps=4,
        rounds=4,
        precision=False,
        xla=False,
        pipeline=False,
        max_steps_per_execution=2,
        clock=clock,
    )

    assert not result.improved, str(result)
    assert result.chosen == result.baseline
    ((label, status, ratio),) = [(t.label, t.status, t.ratio) for t in result.trials[1:]]
    assert (label, status, ratio) == (
        "steps_per_execution=2",
        NOT_FASTER,
        pytest.approx(0.404 / 0.402),
    )
    assert "nothing beat it outside the noise" in str(result)


class _OnlyOnTheHost(keras.layers.Layer):
    """Squares its input through Python: XLA cannot compile it."""

    def call(self, inputs):
        import tensorflow as tf

        out = tf.numpy_function(lambda a: a * a, [inputs], inputs.dtype)
        return tf.ensure_shape(out, inputs.shape)


@pytest.mark.tensorflow
def test_a_candidate_that_fails_to_compile_or_overflows_is_reported_and_not_chosen(
    float32_policy,
):
    def overflowing():
        model = keras.Sequential(
            [
                keras.Input((16,)),
                _OnlyOnTheHost(),
                keras.layers.Dense(4, kernel_initializer=keras.initializers.Constant(300.0)),
                keras.layers.Dense(1, dtype="float32", kernel_initializer="ones"),
            ]
        )
        model.compile(keras.optimizers.SGD(0.0), "mse", jit_compile=False)
        return model

    t4 = recommend_precision([DeviceDescription("GPU", "Tesla T4", (7, 5))])
    x, y = arrays(256)
    result = tune(
        overflowing,
        (x * 10, y),
        batch_size=8,
        steps=16,
        rounds=2,
        precision=t4,
        pipeline=False,
        max_steps_per_execution=1,
    )

    failed = {t.label: t.reason for t in result.trials if t.status == FAILED}
    assert "XLA could not compile the train step" in failed["XLA on"], str(result)
    assert "the loss is" in failed["policy=mixed_float16"], str(result)
    assert result.chosen == result.baseline
    assert keras.config.dtype_policy().name == "float32"  # the policy is put back


class StepClock:
    """A clock that moves 0.25 s on every read: the search's own time, made deterministic."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def test_the_time_budget_stops_the_search(float32_policy):
    keras.config.set_dtype_policy("mixed_bfloat16")  # the user's policy: kept, and tuned under
    clock = StepClock()
    result = tune(
        tiny_mlp,
        arrays(),
        batch_size=8,
        steps=16,
        rounds=2,
        precision=False,
        pipeline=False,
        xla=False,
        time_budget=8.0,
        clock=clock,
    )

    # On this clock the baseline costs 2.75 s and a candidate 3 s: after one candidate at
    # 5.75 s, another would end past the 8 s budget, so none is started.
    assert result.stopped_by_budget
    assert result.seconds <= result.time_budget
    assert [t.label for t in result.trials][1:] == ["steps_per_execution=2"]
    assert "stopped by the time budget" in str(result)
    assert result.baseline.policy == keras.config.dtype_policy().name == "mixed_bfloat16"


def test_bad_arguments_get_one_line_errors_naming_the_argument():
    model = tiny_mlp()
    with pytest.raises(TypeError, match=r"`build_model` must be a zero-argument .* not a model"):
        tune(model, arrays())
    with pytest.raises(TypeError, match=r"`data` must be what model.fit takes.*Received: data="):
        tune(tiny_mlp, "train.csv")
    with pytest.raises(TypeError, match=r"`data` must be what model.fit takes"):
        tune(tiny_mlp, [1, 2, 3])
    with pytest.raises(
        ValueError,
        match=r"`time_budget` must be a positive number of seconds. "
        r"Received: time_budget=0",
    ):
        tune(tiny_mlp, arrays(), time_budget=0)
    with pytest.raises(ValueError, match=r"`rounds` must be at least 2"):
        tune(tiny_mlp, arrays(), rounds=1)
    with pytest.raises(ValueError, match=r"`batch_size` must not exceed the 1024 examples"):
        tune(tiny_mlp, arrays(), batch_size=4096)
    with pytest.raises(TypeError, match=r"`build_model` must return a compiled keras.Model"):
        tune(lambda: "not a model", arrays(), time_budget=5)
    uncompiled = lambda: keras.Sequential([keras.Input((16,)), keras.layers.Dense(1)])  # noqa: E731
    with pytest.raises(ValueError, match=r"call model.compile"):
        tune(uncompiled, arrays(), time_budget=5)


class EveryBatch(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        pass


class EveryFourBatches(EveryBatch):
    update_freq = 4


class EveryEpoch(EveryBatch):
    update_freq = "epoch"


def test_callbacks_that_need_batch_hooks_bound_steps_per_execution():
    notes = []
    assert _callback_bound([EveryEpoch(), keras.callbacks.Callback()], 64, notes) == 64
    assert _callback_bound([EveryFourBatches()], 64, notes) == 4
    assert _callback_bound([EveryFourBatches(), EveryBatch()], 64, notes) == 1
    assert notes[-1] == (
        "steps_per_execution bounded by EveryBatch to 1: it needs its batch hook every batch"
    )
    with pytest.raises(TypeError, match=r"`callbacks` must be a list of keras.callbacks.Callback"):
        _callback_bound(EveryBatch(), 64, notes)
