"""tune's knob that moves a CPU augmentation into the training step: tried where the input is
the limit, chosen when faster with the loss within tolerance, rejected when the loss diverges.

As in tests/test_tuner.py, no timing statistic decides: tune reads an injected clock, and each
call of the augmentation charges it 2 ms (per example on the CPU, per batch in the step), each
call of the model's train function 1 ms, so the input is the limit by construction.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from fakes import CostClock, charge_calls

from tfthroughput.data.pipeline import build_pipeline
from tfthroughput.tuning import tune
from tfthroughput.tuning.result import FASTER, REJECTED
from tfthroughput.tuning.training.data import training_data
from tfthroughput.tuning.training.pipeline import device_dataset

pytestmark = pytest.mark.tensorflow

QUICK = {"steps": 16, "rounds": 3, "precision": False, "xla": False, "time_budget": 120}
RNG = np.random.default_rng(0)
X = RNG.normal(size=(256, 16)).astype("float32")
Y = (X[:, :1] * 0.5).astype("float32")


def _noisy(scale_on_batches, clock=None):
    """Per-element noise that costs 2 ms on ``clock`` a call; ``scale_on_batches`` scales it on
    whole batches."""

    def wait(value):
        if clock is not None:
            clock.advance(0.002)
        return value

    def augment(x, y):
        waited = tf.reshape(tf.numpy_function(wait, [x], tf.float32), tf.shape(x))
        scale = scale_on_batches if x.shape.rank == 2 else 1.0
        return waited + scale * tf.random.uniform(tf.shape(x), -0.01, 0.01), y

    return augment


def _model():
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def _tune(scale_on_batches, per_step=0.0005):
    clock = CostClock()
    dataset = build_pipeline((X, Y), augment_fn=_noisy(scale_on_batches, clock), batch_size=8)

    def build():
        return charge_calls(_model(), clock, launch=0.0005, per_step=per_step)

    return tune(build, dataset, max_steps_per_execution=1, clock=clock, **QUICK)


def _device_trial(result):
    (trial,) = [t for t in result.trials if t.setup.augment_on_device]
    return trial


def test_an_input_bound_cpu_augmentation_moves_into_the_step():
    result = _tune(1.0)
    trial = _device_trial(result)
    # Tried on the best so far, which may hold the rebuilt pipeline: its prefetching charges
    # the shared fake clock on tf.data's threads, so under load that trial can win once in a
    # while (seen once in a suite run).
    assert trial.label.endswith("augmentation in the training step"), trial.label
    assert trial.status == FASTER, str(result)
    assert result.chosen.augment_on_device
    assert trial.loss_check.passed and not trial.loss_check.same_arithmetic
    assert any(n.startswith("augmentation in the training step tried") for n in result.notes)
    assert any('augment_on="device"' in n for n in result.notes)


def test_a_diverging_loss_is_rejected():
    result = _tune(100.0)  # on batches, the noise is 100x: another distribution
    trial = _device_trial(result)
    assert trial.status == REJECTED, str(result)
    assert not trial.loss_check.passed
    assert not result.chosen.augment_on_device


def test_not_tried_where_the_model_is_the_limit():
    # 100 ms a step against 16 ms of augmentation a batch: the input is not the limit.
    result = _tune(1.0, per_step=0.1)
    assert not [t for t in result.trials if t.setup.augment_on_device], str(result)
    assert not result.chosen.augment_on_device


def test_the_knob_needs_a_batch_capable_cpu_augmentation():
    def crop(x, y):  # written for one example: refused on batches
        return tf.image.random_crop(x, [8]), y

    data = training_data(build_pipeline((X, Y), augment_fn=crop, batch_size=8), None)
    dataset, why_not = device_dataset(data, None)
    assert dataset is None and why_not.startswith("`augment_fn` cannot run on batches")
    # Nothing to move (no augment_fn of build_pipeline's on the CPU): not tried, no note.
    plain = training_data(build_pipeline((X, Y), batch_size=8), None)
    assert device_dataset(plain, None) == (None, "")
    assert device_dataset(training_data((X, Y), 8), 8) == (None, "")
    dataset, why_not = device_dataset(
        training_data(build_pipeline((X, Y), augment_fn=_noisy(1.0), batch_size=8), None), None
    )
    assert why_not == "" and dataset.element_spec[0].shape.as_list() == [None, 16]
