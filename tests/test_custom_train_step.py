"""diagnose and tune on a subclassed model with its own train_step, metric trackers and an
optimizer only, on unlabeled data (x only): the shape of autoencoder, VAE, GAN and contrastive
examples. Real fits on tiny models, tune's timed on an injected clock charged known costs per
call of the train function; decisions asserted, never timings."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from fakes import CostClock, charge_calls
from user_models import build_autoencoder, build_two_losses, unlabeled, unlabeled_dataset

from tfthroughput import diagnose, tune
from tfthroughput.tuning.result import BASELINE, PROBE
from tfthroughput.tuning.training.loss_check import reported_loss

SMALL_TUNE = {
    "steps": 8,
    "rounds": 2,
    "time_budget": 60,
    "precision": False,
    "xla": False,
    "max_steps_per_execution": 2,
}


def _values(variables) -> list[np.ndarray]:
    return [np.array(v.numpy(), copy=True) for v in variables]


def test_diagnose_builds_what_the_custom_train_step_builds_and_restores_it():
    # The decoder is used only inside train_step: an optimizer built on the variables that
    # exist before the first step would refuse the decoder's ("Unknown variable").
    model = build_autoencoder()
    report = diagnose(model, unlabeled_dataset(), steps=3, repeats=1, utilization_probe=None)

    assert report.batch_size == 16
    assert report.fit_batches_per_second > 0 and report.compute_batches_per_second > 0
    assert int(model.optimizer.iterations.numpy()) == 0
    assert len(model.trainable_variables) == 4  # encoder and decoder, kernel and bias each
    assert [float(v.numpy()) for v in model.metrics_variables] == [0.0, 0.0]
    slots = [v for v in model.optimizer.variables if model.decoder.name in v.path]
    assert slots and all(not np.any(v.numpy()) for v in slots)
    # The model then trains as a first fit would.
    model.fit(unlabeled_dataset(), epochs=1, verbose=0, shuffle=False)
    assert int(model.optimizer.iterations.numpy()) == 16


def test_diagnose_restores_a_trained_custom_model_exactly():
    model = build_autoencoder()
    model.fit(unlabeled_dataset(), epochs=1, steps_per_epoch=3, verbose=0, shuffle=False)
    before = _values([*model.variables, *model.optimizer.variables, *model.metrics_variables])

    diagnose(model, unlabeled_dataset(), steps=2, repeats=1, utilization_probe=None)

    after = _values([*model.variables, *model.optimizer.variables, *model.metrics_variables])
    assert len(before) == len(after)
    for old, new in zip(before, after, strict=True):
        np.testing.assert_array_equal(old, new)


@pytest.mark.parametrize("data", ["dataset", "arrays"])
def test_tune_on_an_unlabeled_custom_train_step_keeps_the_loss(data):
    given = unlabeled_dataset() if data == "dataset" else unlabeled()
    # Each call of the train function costs a known time on the injected clock, so each
    # comparison settles in its first rounds instead of running on through the noise.
    clock = CostClock()
    result = tune(
        lambda: charge_calls(build_autoencoder(), clock, launch=0.01, per_step=0.001),
        given,
        batch_size=None if data == "dataset" else 16,
        clock=clock,
        **SMALL_TUNE,
    )

    statuses = [trial.status for trial in result.trials]
    assert statuses[0] == BASELINE
    if data == "dataset":
        assert statuses[1] == PROBE  # the compute-only probe fed the batch as x alone
    checked = [trial for trial in result.trials if trial.loss_check is not None]
    assert checked, statuses
    assert all(trial.loss_check.passed for trial in checked)
    assert all(np.isfinite(trial.loss_check.baseline_loss) for trial in checked)


def test_tune_compares_the_first_metric_when_the_model_reports_no_loss_and_says_so():
    clock = CostClock()
    result = tune(
        lambda: charge_calls(build_two_losses(), clock, launch=0.01, per_step=0.001),
        unlabeled_dataset(),
        pipeline=False,
        clock=clock,
        **SMALL_TUNE,
    )

    note = (
        "no `loss` in what the model reports: the loss check compares `reconstruction_loss` instead"
    )
    assert note in result.trials[0].reason
    assert all(t.loss_check.passed for t in result.trials if t.loss_check is not None)


def test_reported_loss_reads_loss_else_the_first_metric():
    assert reported_loss({"loss": [2.0, 1.5], "mae": [3.0, 2.0]}) == (1.5, None)
    value, note = reported_loss({"accuracy": [0.5], "d_loss": [0.7], "g_loss": [1.2]})
    assert value == 0.7
    assert note == "no `loss` in what the model reports: the loss check compares `d_loss` instead"
    assert reported_loss({"mae": [0.25]}) == (
        0.25,
        "no `loss` in what the model reports: the loss check compares `mae` instead",
    )
    with pytest.raises(ValueError, match="reported no metric"):
        reported_loss({})


def test_an_unlabeled_model_through_keras_own_fit_sees_x_alone():
    # What every feed above relies on: fit hands an x-only batch to train_step as x itself.
    model = build_autoencoder()
    history = model.fit(unlabeled(), batch_size=16, epochs=1, verbose=0)
    assert list(history.history) == ["loss"]
    assert keras.tree.flatten(model.trainable_variables)[0].shape == (16, 4)
