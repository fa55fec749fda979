"""tuning/script/captured_call.py: what ``tune`` takes from a call a script was about to make
(its data, batch size and ``steps_per_epoch``; a one-shot iterator refused), and ``tune`` run on
a rebuilt copy of the call's model: the script's model, weights and random state as they were,
the strategy it was built under passed on, every refusal one ``CannotTune`` line."""

from __future__ import annotations

import itertools
import random

import keras
import numpy as np
import pytest

from tfthroughput.monitor.call_capture import CapturedCall
from tfthroughput.tuning import InferenceTuneResult, TuneSetup
from tfthroughput.tuning.script.captured_call import CannotTune, tune_captured, tune_data

X = np.arange(64, dtype="float32").reshape(16, 4) / 64
Y = np.ones((16, 1), "float32")


class Batches(keras.utils.PyDataset):
    def __len__(self):
        return 2

    def __getitem__(self, index):
        return X[:8], Y[:8]


def test_arrays_get_the_call_batch_size_or_keras_default():
    assert tune_data({"x": X, "y": Y, "batch_size": 8}, inference=False) == (
        (X, Y),
        {"batch_size": 8},
    )
    data, extra = tune_data({"x": X, "y": None, "batch_size": None}, inference=False)
    assert data is X and extra == {"batch_size": 32}  # unlabeled: x alone; predict's default
    data, extra = tune_data({"x": X, "y": Y, "steps_per_epoch": 2}, inference=False)
    assert extra == {"batch_size": 32, "steps_per_epoch": 2}


def test_inference_takes_x_alone_and_no_steps_per_epoch():
    data, extra = tune_data({"x": X, "y": Y, "batch_size": 4, "steps_per_epoch": 2}, True)
    assert data is X and extra == {"batch_size": 4}


def test_batched_inputs_keep_their_batches():
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    assert tune_data({"x": dataset, "batch_size": 8}, inference=False) == (dataset, {})
    batches = Batches()
    assert tune_data({"x": batches, "steps_per_epoch": 2}, inference=False) == (
        batches,
        {"steps_per_epoch": 2},
    )
    assert tune_data({"x": batches}, inference=True) == (batches, {})


def test_any_one_shot_iterator_is_refused_by_its_type():
    with pytest.raises(CannotTune, match=r"^the call's data is a one-shot list_iterator, which"):
        tune_data({"x": iter([X, X]), "y": None}, inference=True)


def compiled_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def captured(model, **arguments):
    compile_arguments = {"optimizer": "sgd", "loss": "mse"}
    return CapturedCall("predict", model, arguments, compile_arguments, model.get_weights())


def test_tune_runs_on_a_rebuilt_copy_with_the_call_data():
    model = compiled_model()
    weights = model.get_weights()
    clock = itertools.count(0.0, 10.0).__next__  # 10 s a reading: the budget ends the search

    result = tune_captured(
        captured(model, x=X, batch_size=4),
        mode="inference",
        steps=4,
        rounds=2,
        time_budget=1.0,
        precision=False,
        clock=clock,
    )

    assert isinstance(result, InferenceTuneResult) and result.stopped_by_budget
    assert result.baseline == TuneSetup(1, False, "float32", batch_size=4)
    assert [t.status for t in result.trials] == ["baseline"]
    for kept, now in zip(weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(kept, now)  # the script's own model is untouched


def test_a_model_that_cannot_be_rebuilt_is_one_line():
    class Scorer(keras.Model):
        def __init__(self, lookup):  # a Python object the config cannot carry
            super().__init__()
            self.lookup, self.dense = lookup, keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

    model = Scorer(object())
    model(X)
    with pytest.raises(CannotTune, match=r"^cannot rebuild the model: Scorer \(") as raised:
        tune_captured(captured(model, x=X, y=Y))
    # Raised from None: Keras's own traceback is not shown under the line.
    assert raised.value.__suppress_context__ and "\n" not in str(raised.value)


def test_refusals_of_tune_are_one_line_and_the_check_build_draws_nothing():
    call = captured(compiled_model(), x=X, y=Y, batch_size=4)
    random.seed(7)
    with pytest.raises(CannotTune) as raised:
        tune_captured(call, rounds=1)  # refused after the copy is built once as a check
    assert str(raised.value) == (
        "tune cannot run on this call: `rounds` must be at least 2 (the noise is the spread "
        "between rounds). Received: rounds=1"
    )
    assert raised.value.__suppress_context__
    drawn = random.random()
    random.seed(7)
    assert drawn == random.random()  # Keras's unseeded initializers draw from Python's


@pytest.mark.tensorflow
def test_the_strategy_the_model_was_built_under_is_passed_to_tune():
    import tensorflow as tf

    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = compiled_model()
    call = captured(model, x=X, batch_size=4)
    # tune refuses a strategy in inference mode: so it was given one.
    with pytest.raises(CannotTune, match=r"^tune cannot run on this call: `strategy` applies"):
        tune_captured(call, mode="inference")
    # One given by the caller wins (None here): the next refusal is another argument's.
    with pytest.raises(CannotTune, match=r"`rounds` must be at least 2"):
        tune_captured(call, mode="inference", strategy=None, rounds=1)
