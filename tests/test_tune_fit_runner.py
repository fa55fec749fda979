"""A training trial's runner (tuning/training/fit_runner.py): ``fit`` of ``steps`` steps timed
by epoch hooks around the user's callbacks, its warm-up's loss, and the runs that end a trial
with a reason. Each train-function call costs known times on an injected clock
(``CostClock``, ``charge_calls``); a model of zero weights that never learns (SGD at rate 0)
reports a known loss. The rewarm and the compute-only probe: tests/test_tuner.py."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from fakes import CostClock, charge_calls

from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training.fit_runner import FitRunner

LAUNCH, PER_STEP = 0.01, 0.001  # seconds a train-function call costs, and each of its steps
X = np.ones((256, 4), "float32")


def feed(target: float, examples: int = 256) -> dict:
    """Arrays whose every step's loss is ``target ** 2`` on the zero model."""
    return {"x": X[:examples], "y": np.full((examples, 1), target, "float32"), "batch_size": 8}


def zero_model() -> keras.Model:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, kernel_initializer="zeros")])
    model.compile(keras.optimizers.SGD(0.0), "mse")
    return model


class ReportsOwnLoss(keras.Model):
    """A model with its own ``train_step`` that reports ``d_loss`` and no ``loss``."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1, kernel_initializer="zeros")

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, y = data
        loss = keras.ops.mean((self(x) - y) ** 2)
        return {"accuracy": 0.5, "d_loss": loss}


class EpochCost(keras.callbacks.Callback):
    """A user's callback whose epoch hooks cost known seconds (``{epoch: (begin, end)}``)."""

    def __init__(self, clock, costs):
        super().__init__()
        self.clock, self.costs = clock, costs

    def on_epoch_begin(self, epoch, logs=None):
        self.clock.advance(self.costs.get(epoch, (0.0, 0.0))[0])

    def on_epoch_end(self, epoch, logs=None):
        self.clock.advance(self.costs.get(epoch, (0.0, 0.0))[1])


class StopAfterFirstEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = True


def started(clock, *, spe=1, steps=16, build=zero_model, fed=None, **how) -> FitRunner:
    runner = FitRunner(
        TuneSetup(spe, False, "float32", batch_size=8),
        lambda: charge_calls(build(), clock, launch=LAUNCH, per_step=PER_STEP),
        fed or feed(2.0),
        steps=steps,
        examples_per_step=8,
        seed=0,
        clock=clock,
        **how,
    )
    runner.start()
    return runner


def test_a_timed_run_is_steps_of_the_compiled_function_after_a_warm_up_with_its_loss():
    clock = CostClock()
    runner = started(clock, spe=4, steps=16, warmup_steps=8)
    # The warm-up: 2 calls of 4 steps; the loss fit reports, (0 - 2)^2.
    assert runner.warmup_seconds == pytest.approx(2 * LAUNCH + 8 * PER_STEP)
    assert runner.warmup_loss == 4.0
    assert int(runner.model.optimizer.iterations) == 8
    assert runner.run() == pytest.approx(4 * LAUNCH + 16 * PER_STEP)
    assert int(runner.model.optimizer.iterations) == 8 + 16
    runner.set_steps(32, feed(2.0))  # lengthened: later runs twice as long
    assert runner.run() == pytest.approx(8 * LAUNCH + 32 * PER_STEP)
    runner.close()
    assert runner.model is None


def test_the_warm_up_runs_on_the_batches_it_is_checked_on():
    runner = started(CostClock(), steps=8, check_feed=feed(3.0, examples=64))
    assert runner.warmup_loss == 9.0  # (0 - 3)^2: the check feed's, not the timed runs'
    runner.close()


def test_the_users_epoch_hooks_are_inside_the_timed_run():
    clock = CostClock()
    runner = started(clock, steps=8, callbacks=[EpochCost(clock, {0: (0.5, 0.25)})])
    assert runner.run() == pytest.approx(8 * (LAUNCH + PER_STEP) + 0.75)
    runner.close()


def test_the_second_epoch_of_a_two_epoch_fit_is_timed_alone():
    clock = CostClock()
    # The first epoch's hooks cost 1 s (its iterator starting), the second's 0.25 s.
    costs = EpochCost(clock, {0: (1.0, 0.0), 1: (0.0, 0.25)})
    runner = started(clock, steps=8, callbacks=[costs])
    before = int(runner.model.optimizer.iterations)
    assert runner.run_second_epoch() == pytest.approx(8 * (LAUNCH + PER_STEP) + 0.25)
    assert int(runner.model.optimizer.iterations) == before + 16
    runner.close()


def test_a_fit_stopped_by_a_callback_fails_the_trial():
    runner = started(CostClock(), steps=8, callbacks=[StopAfterFirstEpoch()])
    with pytest.raises(TrialFailed, match=r"^fit stopped before the end of the epoch \(stop_"):
        runner.run_second_epoch()
    runner.close()


def test_a_loss_that_is_not_finite_fails_the_trial():
    with pytest.raises(TrialFailed, match=r"^the loss is nan after 8 steps$"):
        started(CostClock(), steps=8, fed=feed(float("nan")))


def test_a_fit_that_raises_fails_the_trial_with_one_line():
    five_features = {"x": np.ones((64, 5), "float32"), "y": np.ones((64, 1)), "batch_size": 8}
    with pytest.raises(TrialFailed, match=r"^ValueError: [^\n]+$"):
        started(CostClock(), steps=8, fed=five_features)


def test_a_model_reporting_its_own_loss_is_checked_on_it_and_said_once():
    def own_loss():
        model = ReportsOwnLoss()
        model.compile(keras.optimizers.SGD(0.0))
        return model

    runner = started(CostClock(), steps=8, build=own_loss)
    runner.run()
    assert runner.warmup_loss == 4.0
    assert runner.notes == [
        "no `loss` in what the model reports: the loss check compares `d_loss` instead"
    ]
    runner.close()
