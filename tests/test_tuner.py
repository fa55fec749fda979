"""tune() on real fits: its decisions on launch-bound, input-bound, compute-bound and failing
models, and the time budget (its argument checks: tests/test_tune_arguments.py).

No timing statistic decides a test: tune reads the injected ``clock``, and the tests charge
it known costs (each train-function call costs a fixed launch time plus a time per step it
runs; a slow input map costs a fixed time per batch), so each ratio, and each decision, is
exact. The real speed-ups are shown side by side by benchmarks/tune.py. The tests marked
``tensorflow`` need TensorFlow; the others re-run under Keras's JAX backend with TensorFlow
blocked (tests/test_tune_backends.py).
"""

from __future__ import annotations

import sys

import keras
import numpy as np
import pytest
from fakes import CostClock, charge_calls
from tiny_models import arrays, tiny_mlp

from tfthroughput.precision.precision_recommendation import DeviceDescription, recommend_precision
from tfthroughput.tuning import TuneResult, tune
from tfthroughput.tuning._settings import _callback_bound
from tfthroughput.tuning.result import BASELINE, FAILED, FASTER, NOT_FASTER
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training.replay import Reseed
from tfthroughput.tuning.training.workload import same_arithmetic_as

QUICK = {"steps": 32, "rounds": 3, "precision": False, "time_budget": 120}


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
    assert chosen.noise == 0.0  # equal rounds: the interval is one point
    # 3 rounds asked, 5 run: the first with an interval of 90 % (the paired rule)
    assert chosen.rounds_won == chosen.rounds == 5
    assert chosen.loss_check.same_arithmetic and chosen.loss_check.passed
    assert chosen.loss_check.relative_difference <= 1e-5
    assert result.compile_kwargs == {
        "steps_per_execution": 8,
        "jit_compile": result.baseline.jit_compile,
    }
    assert result.trials[0].status == BASELINE
    assert result.trials[0].examples_per_second == pytest.approx(32 * 8 / 0.144)
    assert "steps_per_execution=8" in str(result)


@pytest.mark.tensorflow  # under JAX, which always compiles, XLA is not a knob
def test_xla_flipped_is_tried_around_the_first_lines_best_not_from_one():
    clock = CostClock()
    # XLA off as compiled; on, a step costs 0.6 ms instead of 0.5: slower at every value.
    per_step = lambda model: 0.0006 if model.jit_compile else 0.0005  # noqa: E731
    build = lambda: charge_calls(tiny_mlp(), clock, launch=0.004, per_step=per_step)  # noqa: E731
    result = tune(
        build,
        arrays(),
        batch_size=8,
        pipeline=False,
        max_steps_per_execution=8,
        clock=clock,
        **QUICK,
    )

    # At the first line's best (8), then halved: 144/35.2 ms and 144/51.2 ms, two values in a row
    # without a gain over 4.5x end it, where a line from 1 would have timed four values.
    assert [(t.label, round(t.ratio, 2)) for t in result.trials[1:]] == [
        ("steps_per_execution=2", 1.8),
        ("steps_per_execution=4", 3.0),
        ("steps_per_execution=8", 4.5),
        ("steps_per_execution=8, XLA on", 4.09),
        ("steps_per_execution=4, XLA on", 2.81),
    ]
    assert result.chosen == TuneSetup(8, False, "float32", batch_size=8)


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
    assert probe.memory_mib is None  # the baseline's model: no memory of its own
    assert "tfthroughput.build_pipeline(data, batch_size=None, cache=True" in result.snippet


def mapped_as_the_guide_says(clock: CostClock, *, map_seconds: float):
    """Batches of 8 from ``arrays(256)`` through a map of Python work costing ``map_seconds``
    a batch on ``clock``, written as the guide says (parallel map, prefetch): lint_pipeline
    finds nothing in it."""
    import tensorflow as tf

    def slow(x, y):
        def wait(value):
            clock.advance(map_seconds)
            return value

        return tf.ensure_shape(tf.numpy_function(wait, [x], tf.float32), [None, 16]), y

    return (
        tf.data.Dataset.from_tensor_slices(arrays(256))
        .batch(8)
        .map(slow, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


@pytest.mark.tensorflow
def test_a_pipeline_the_probe_let_pass_joins_the_best_and_the_line_runs_on_from_there(
    float32_policy,
):
    clock = CostClock()
    dataset = mapped_as_the_guide_says(clock, map_seconds=0.008)
    # A call costs 0.05 ms; a step 40 ms in float32 and 0.1 ms in bfloat16. The map's 8 ms is
    # a sixth of float32's step, an input-bound fraction under diagnose's 0.25, so the
    # pipeline is not tried first; it is nearly all of bfloat16's: more steps per call save
    # under 0.3 % there, until the cached pipeline leaves a call's cost a third of the step
    # (0.15 ms at one step per call, 0.106 at 8).
    per_step = lambda model: 0.0001 if model.dtype_policy.name == "mixed_bfloat16" else 0.04  # noqa: E731
    build = lambda: charge_calls(tiny_mlp(), clock, launch=0.00005, per_step=per_step)  # noqa: E731
    bfloat16 = recommend_precision([DeviceDescription("GPU", "NVIDIA A100", (8, 0))])
    result = tune(
        build,
        dataset,
        xla=False,
        max_steps_per_execution=8,
        clock=clock,
        **{**QUICK, "precision": bfloat16},
    )

    assert any(note.startswith("input pipeline not tried first") for note in result.notes), str(
        result
    )
    assert "input pipeline tried on the best setup so far: faster" in result.notes, str(result)
    chosen = result.chosen
    assert (chosen.policy, chosen.pipeline, chosen.steps_per_execution) == (
        "mixed_bfloat16",
        True,
        8,
    ), str(result)
    # Where the pipeline joined (the bfloat16 line without it is flat, so it joins below 8),
    # the line runs on from that value doubled, up to the bound.
    joined = next(i for i, t in enumerate(result.trials) if t.setup.pipeline)
    start = result.trials[joined].setup.steps_per_execution
    after = [t.setup for t in result.trials[joined + 1 :]]
    assert [s.steps_per_execution for s in after] == [v for v in (2, 4, 8) if v > start], str(
        result
    )
    assert all(s.pipeline and s.policy == "mixed_bfloat16" for s in after), str(result)
    last = result.trials[-1]
    assert last.setup == chosen and last.loss_check.passed, str(result)
    # 48.05 ms against 0.106 ms a step (452x), give or take the batch or two tf.data maps
    # ahead of fit in the baseline's runs.
    assert 420 < last.ratio < 480, str(result)


def test_a_rewarm_is_one_untimed_execution_where_another_model_started_since_the_last_run():
    from tfthroughput.tuning.training.fit_runner import FitRunner

    clock = CostClock()
    x, y = arrays(256)

    def started(spe):
        runner = FitRunner(
            TuneSetup(spe, False, "float32", batch_size=8),
            charged_mlp(clock, launch=0.004, per_step=0.0005),
            {"x": x, "y": y, "batch_size": 8, "shuffle": False},
            steps=16,
            examples_per_step=8,
            seed=0,
            clock=clock,
        )
        runner.start()
        return runner

    def rewarm_cost(runner):
        before, iterations = clock(), int(runner.model.optimizer.iterations)
        runner.rewarm()
        return clock() - before, int(runner.model.optimizer.iterations) - iterations

    first = started(4)
    assert rewarm_cost(first) == (0.0, 0)  # nothing started since its warm-up
    second = started(2)
    # One call of 4 steps: 4 ms + 4 x 0.5 ms on the clock, 4 optimizer steps; then warm again.
    assert rewarm_cost(first) == (pytest.approx(0.006), 4)
    assert rewarm_cost(first) == (0.0, 0)
    assert rewarm_cost(second) == (0.0, 0)  # the last started
    first.close(), second.close()


def test_the_probe_times_the_baselines_own_model_on_its_feed_and_builds_nothing():
    from tfthroughput.tuning.engine.trial_runner import TrialRunner
    from tfthroughput.tuning.training.fit_runner import FitRunner

    clock, builds = CostClock(), []
    x, y = arrays(256)

    def build():
        builds.append(1)
        return charge_calls(tiny_mlp(), clock, launch=0.004, per_step=0.0005)

    base = FitRunner(
        None,
        build,
        {"x": x, "y": y, "batch_size": 8, "shuffle": False},
        steps=16,
        examples_per_step=8,
        seed=0,
        clock=clock,
        batch_size=8,
    )
    base.start()
    starts = TrialRunner.starts
    probe = base.fed_otherwise({"x": x[:64], "y": y[:64], "batch_size": 8}, steps=8)
    probe.start()

    assert len(builds) == 1 and probe.model is base.model
    assert TrialRunner.starts == starts  # so the baseline needs no rewarm after it
    assert (probe.memory_mib, probe.warmup_seconds) == (None, pytest.approx(8 * 0.0045))
    assert probe.run() == pytest.approx(8 * 0.0045)  # 8 calls of one step: 4 + 0.5 ms each
    before = clock()
    base.rewarm()
    assert clock() == before
    probe.close()
    assert base.run() == pytest.approx(16 * 0.0045)  # the model stays the baseline's


def test_a_setup_keeps_the_baselines_arithmetic_unless_xla_policy_batch_or_augmentation_change():
    base = TuneSetup(1, False, "float32", batch_size=32)
    assert same_arithmetic_as(base, base.with_(steps_per_execution=8, pipeline=True))
    for changed in (
        {"jit_compile": True},
        {"policy": "mixed_bfloat16"},
        {"batch_size": 64},
        {"augment_on_device": True},
    ):
        # e.g. the pipeline tried on a bfloat16 best: its loss is checked at the tolerance
        assert not same_arithmetic_as(base, base.with_(pipeline=True, **changed)), changed


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


def test_the_time_budget_stops_the_search(float32_policy, nothing_frozen):
    import gc

    keras.config.set_dtype_policy("mixed_bfloat16")  # the user's policy: kept, and tuned under
    clock = StepClock()
    frozen_while_built = []

    def build():
        frozen_while_built.append(gc.get_freeze_count() > 0)
        return tiny_mlp()

    result = tune(
        build,
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
    # The trials' collections scanned only what the search made; the rest is handed back.
    assert frozen_while_built and all(frozen_while_built)
    assert gc.get_freeze_count() == 0


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


# ----------------------------------------------------------------- the confirmation


class EpochHookCost(keras.callbacks.Callback):
    """A user's callback whose epoch hook costs known seconds on the clock (a checkpoint, say):
    the search's runs never call it, the user's epochs do."""

    def __init__(self, clock, cost):
        super().__init__()
        self._clock, self._cost = clock, cost

    def on_epoch_end(self, epoch, logs=None):
        self._clock.advance(self._cost(self.model))


def test_the_confirmation_times_the_users_epochs_and_gives_the_headline():
    clock = CostClock()
    result = tune(
        charged_mlp(clock, launch=0.004, per_step=0.0005),
        arrays(),  # 1,024 examples: 128 steps of 8, longer than the confirmation's share
        batch_size=8,
        xla=False,
        pipeline=False,
        max_steps_per_execution=8,
        clock=clock,
        **QUICK,
    )

    confirmation = result.confirmation
    assert confirmation.pick == confirmation.setup == result.chosen
    # Each side's epoch is cut at the search's own run (32 steps): 0.144 s against 0.032 s.
    assert confirmation.work == "the first 32 of each fit epoch's 128 steps"
    assert (confirmation.rounds, confirmation.rounds_won) == (5, 5)
    assert confirmation.ratio == pytest.approx(4.5) and result.speedup == confirmation.ratio
    assert confirmation.baseline_examples_per_second == pytest.approx(256 / 0.144)
    assert confirmation.outcome == ""
    text = str(result)
    assert (
        "search's pick: steps_per_execution=8: 4.50x [4.50-4.50] (median of 5 rounds, 94% "
        "interval) over the baseline in the search's runs"
    ) in text
    assert (
        "chosen: steps_per_execution=8: 4.50x [4.50-4.50] (median of 5 rounds, 94% interval) "
        "over the baseline by the first 32 of each"
    ) in text
    assert result.snippet.startswith("# 4.50x [4.50-4.50] (median of 5 rounds, 94% interval)")
    assert result.to_dict()["confirmation"]["ratio"] == pytest.approx(4.5)


def tune_steps_per_execution_by_epochs(clock: CostClock, callback) -> TuneResult:
    """``steps_per_execution`` alone tuned on the injected clock, over 256 examples (32 steps of
    8: the confirmation times whole epochs), ``callback`` run in the confirmation's fits."""
    return tune(
        charged_mlp(clock, launch=0.004, per_step=0.0005),
        arrays(256),
        batch_size=8,
        callbacks=[callback],
        xla=False,
        pipeline=False,
        max_steps_per_execution=8,
        clock=clock,
        **QUICK,
    )


def test_a_pick_the_users_epochs_do_not_confirm_gives_way_to_the_next_best():
    clock = CostClock()
    # At 8 steps per call the callback costs 0.5 s an epoch: 0.144 s against 0.532 s by whole
    # epochs (0.27x), while 4 steps per call keep their 3.0x (0.144 s against 0.048 s).
    slow_at_eight = EpochHookCost(clock, lambda m: 0.5 if m.steps_per_execution == 8 else 0.0)
    result = tune_steps_per_execution_by_epochs(clock, slow_at_eight)

    confirmation = result.confirmation
    assert confirmation.pick.steps_per_execution == 8
    assert result.chosen.steps_per_execution == 4 == confirmation.setup.steps_per_execution
    assert confirmation.work == "whole fit epochs (32 steps, callbacks included)"
    assert result.speedup == pytest.approx(3.0)
    assert confirmation.outcome == (
        "confirmation: the search's pick, steps_per_execution=8, was 0.27x [0.27-0.27] (median "
        "of 5 rounds, 94% interval), 0 of 5 rounds won, slower; the next-best, "
        "steps_per_execution=4, was 3.00x [3.00-3.00] (median of 5 rounds, 94% interval), 5 of 5 "
        "rounds won: steps_per_execution=4 is chosen"
    )
    assert confirmation.outcome in str(result).splitlines()
    assert result.chosen_trial.ratio == pytest.approx(3.0)  # the search's own figure for it
    # The search's seconds are its own; the confirmation's come on top (nothing else ran).
    assert result.seconds + confirmation.seconds == pytest.approx(clock.now)
    assert f"search: 4 trials in {result.seconds:.1f} s" in str(result)


class FitStartCost(keras.callbacks.Callback):
    """A cost in the first epoch of each ``fit`` only, as an input's iterator and prefetching
    start once per ``fit``: the user's many-epoch ``fit`` pays it once."""

    def __init__(self, clock, cost):
        super().__init__()
        self._clock, self._cost = clock, cost

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 0:
            self._clock.advance(self._cost(self.model))


def test_the_confirmation_times_an_epoch_as_it_runs_inside_a_many_epoch_fit():
    clock = CostClock()
    # 0.1 s at the start of each fit with more than one step per call: a one-epoch fit would
    # read 0.144 s against 0.132 s (1.09x); the second epoch of a two-epoch fit reads 4.5x.
    start_cost = FitStartCost(clock, lambda m: 0.1 if m.steps_per_execution > 1 else 0.0)
    result = tune_steps_per_execution_by_epochs(clock, start_cost)

    assert result.confirmation.work == "whole fit epochs (32 steps, callbacks included)"
    assert result.chosen.steps_per_execution == 8
    assert result.speedup == pytest.approx(4.5)


class FitShapes(keras.callbacks.Callback):
    """Each ``fit``'s steps per epoch and epochs, as Keras gives them to callbacks."""

    def __init__(self):
        super().__init__()
        self.fits = []

    def on_train_begin(self, logs=None):
        self.fits.append((self.params["steps"], self.params["epochs"]))


def test_the_confirmation_warms_each_side_by_one_execution_where_a_fit_epoch_warms_the_next():
    clock = CostClock()
    shapes = FitShapes()  # the user's callbacks run in the confirmation's fits only
    tune_steps_per_execution_by_epochs(clock, shapes)

    timed = [fit for fit in shapes.fits if fit == (32, 2)]
    warmups = [steps for steps, epochs in shapes.fits if epochs == 1]
    assert len(timed) == 5 * 3  # five rounds of the baseline, the pick and the next-best
    # Each side's start and re-warm-up: one execution of at most 8 steps, not a 32-step epoch.
    assert len(timed) + len(warmups) == len(shapes.fits)
    assert warmups and max(warmups) == 8


def test_when_no_pick_is_faster_by_the_users_epochs_the_baseline_is_kept():
    clock = CostClock()
    # A 5 s epoch hook for every setup: 5.144 s against 5.032 s (1.02x, every round won) is
    # inside the 3 % noise floor; so is 4 steps per call.
    result = tune_steps_per_execution_by_epochs(clock, EpochHookCost(clock, lambda m: 5.0))

    assert not result.improved and result.chosen == result.baseline
    assert result.speedup == 1.0
    assert result.confirmation.outcome.endswith(
        "steps_per_execution=4, was 1.02x [1.02-1.02] (median of 5 rounds, 94% interval), 5 of 5 "
        "rounds won, not shown faster: the baseline is kept"
    )
    text = str(result)
    assert (
        "search's pick: steps_per_execution=8: 4.50x [4.50-4.50] (median of 5 rounds, 94% "
        "interval) over the baseline in the search's runs"
    ) in text
    assert (
        "chosen: the baseline, as given: nothing beat it beyond the noise by whole fit epochs "
        "(32 steps, callbacks included)"
    ) in text
    assert "model.compile" not in text  # no snippet for the baseline


@pytest.mark.tensorflow
def test_the_callers_random_state_is_as_it_was_after_a_search(float32_policy):
    import random

    import tensorflow as tf

    def draws():
        # Each source a later unseeded draw of the caller's takes from: the eager op seeds
        # follow TensorFlow's global seed in sequence (a shuffle in fit takes one of them).
        return (
            random.random(),
            float(np.random.rand()),
            float(keras.random.uniform(())),
            float(tf.random.uniform(())),
            int(tf.random.shuffle(tf.range(100))[0]),
        )

    keras.utils.set_random_seed(7)
    expected = draws()
    keras.utils.set_random_seed(7)
    clock = CostClock()
    tune(
        charged_mlp(clock, launch=0.0, per_step=0.001),
        arrays(64),
        batch_size=16,
        steps=4,
        rounds=2,
        precision=False,
        xla=False,
        pipeline=False,
        max_steps_per_execution=1,
        clock=clock,
    )
    assert draws() == expected


@pytest.mark.tensorflow  # the rebuilt pipeline is tf.data
def test_the_rebuilt_pipeline_of_arrays_shuffles_every_pass_as_fit_does():
    # fit shuffles arrays each epoch by default: the tuned fit must train on the same stream
    # (it did not: a cached pipeline kept one order). A dataset keeps its own order.
    import tensorflow as tf

    from tfthroughput.tuning.training.data import training_data
    from tfthroughput.tuning.training.pipeline import plan, rebuilt

    x = np.arange(64, dtype="float32").reshape(32, 2)
    data = training_data((x, x[:, :1]), 4)
    pipeline = plan(data)
    assert pipeline.build_pipeline_kwargs["shuffle_buffer"] == 32
    assert "shuffled every pass over all 32 examples" in " ".join(pipeline.notes)
    batches = iter(rebuilt(data, pipeline, 4))
    passes = [np.concatenate([next(batches)[1].numpy() for _ in range(8)]) for _ in range(2)]
    assert sorted(passes[0].ravel()) == sorted(passes[1].ravel()) == list(x[:, 0])
    assert not np.array_equal(passes[0], passes[1])

    dataset = training_data(tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4), None)
    assert "shuffle_buffer" not in plan(dataset).build_pipeline_kwargs


@pytest.mark.tensorflow  # the unseeded shuffle is tf.data's
@pytest.mark.same_on_every_backend  # the engine's own frames: the JAX re-run skips it
def test_a_trials_fit_runs_at_most_8_frames_below_tune():
    # The search alone runs trials (a knob is a suspended generator meanwhile), so the user's
    # fit is near the top of a traceback from inside it. The search runs the confirmation,
    # which starts its runners itself, and starts the runners a judgement asks for (the loss
    # check's passes of the input, with the judge suspended), so none of them sits deeper.
    import tensorflow as tf

    depths: dict[str, list[int]] = {
        "loss check's passes": [],
        "confirmation's start": [],
        "confirmation's rounds": [],
        "search": [],
    }

    class Counted(keras.Model):
        def fit(self, *args, **kwargs):
            frame, depth, names = sys._getframe(), 0, set()
            while frame.f_code.co_name != "tune":
                names.add(frame.f_code.co_name)
                frame, depth = frame.f_back, depth + 1
            if any(isinstance(c, Reseed) for c in kwargs.get("callbacks") or ()):
                depths["loss check's passes"].append(depth)
            elif "confirm" in names:
                part = "rounds" if "_timed_rounds" in names else "start"
                depths[f"confirmation's {part}"].append(depth)
            else:
                depths["search"].append(depth)
            return super().fit(*args, **kwargs)

    clock = CostClock()  # known costs: the comparisons settle in their first rounds

    def build() -> keras.Model:
        inputs = keras.Input((16,))
        model = Counted(inputs, keras.layers.Dense(1)(keras.layers.Dense(8)(inputs)))
        model.compile(optimizer="sgd", loss="mse")
        return charge_calls(model, clock, launch=0.01, per_step=0.001)

    # An unseeded shuffle and a sequential map: the rebuilt pipeline reads its own pass, so
    # its loss check measures the input's variation; the line adds a search and a confirmation.
    x, y = arrays()
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).map(lambda a, b: (a, b))
    tune(build, data.batch(16), xla=False, max_steps_per_execution=2, clock=clock, **QUICK)
    assert all(depths.values()), depths
    assert max(max(found) for found in depths.values()) <= 8, depths
