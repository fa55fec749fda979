"""The warning for an epoch that is not a whole number of executions (Keras runs whole
executions: the epoch trains more steps than asked), from a real fit."""

from __future__ import annotations

import warnings

import keras
import numpy as np
from fits import EpochDial, fake_gpus

from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.monitor.execution_check import partial_execution_message


def _model(steps_per_execution: int) -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    return model


def _arrays(examples: int):
    x = np.random.default_rng(0).normal(size=(examples, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def test_an_epoch_of_part_of_an_execution_is_warned_about_once(tmp_path):
    x, y = _arrays(32 * 8)
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(EpochDial()))
    model = _model(steps_per_execution=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=8, epochs=2, steps_per_epoch=6, callbacks=[monitor], verbose=0)
        model.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=8, callbacks=[monitor], verbose=0)
    messages = [str(w.message) for w in caught if issubclass(w.category, MonitoringWarning)]
    assert messages == [partial_execution_message(6, 4)]
    assert messages[0].startswith(
        "fit(steps_per_epoch=6) with steps_per_execution=4 trains 8 steps per epoch, not 6"
    )
    # What the warning says is what Keras does: 2 epochs of 8 steps, then one of 8.
    assert int(model.optimizer.iterations.numpy()) == 24
    assert partial_execution_message(None, 4) is None  # the epoch ends with the data
