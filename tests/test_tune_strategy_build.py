"""A trial's model built under a strategy from its input's shapes (tuning/training/
strategy_build.py), never from a throwaway iterator of Keras's: the symbolic batch read from a
dataset's element spec or from arrays, the build, and the fits after it. That a whole ``tune``
makes no iterator for a build: tests/test_tune_strategy.py."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from symbolic_builds import build_given

from tfthroughput.tuning.training.strategy_build import (
    build_from_spec,
    symbolic_batch,
    unknown_batch,
)

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="tf.distribute needs the TensorFlow backend"
)

DATA = (np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32"))


def build():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def described(batch):
    """``(shape, dtype)`` of each Keras tensor of ``batch``, in its structure."""
    return keras.tree.map_structure(lambda t: (tuple(t.shape), t.dtype), batch)


def fresh_unbuilt_model(strategy) -> keras.Model:
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(1)])  # no Input
        model.compile(keras.optimizers.SGD(0.01), "mse", metrics=["mae"])
    return model


def test_a_datasets_element_spec_gives_the_batch_with_its_batch_dimension_unknown():
    x = {"image": DATA[0], "label_id": np.zeros((64,), "int32")}
    dataset = tf.data.Dataset.from_tensor_slices((x, DATA[1])).batch(16, drop_remainder=True)
    assert described(symbolic_batch({"x": dataset})) == (
        {"image": ((None, 4), "float32"), "label_id": ((None,), "int32")},
        ((None, 1), "float32"),
    )


def test_arrays_give_x_y_and_weights_as_fit_takes_them():
    x, y = DATA
    weights = np.ones((64,), "float64")
    assert described(symbolic_batch({"x": x, "batch_size": 16})) == (((None, 4), "float32"),)
    assert described(symbolic_batch({"x": x, "y": y, "sample_weight": weights})) == (
        ((None, 4), "float32"),
        ((None, 1), "float32"),
        ((None,), "float64"),
    )
    several = symbolic_batch({"x": [x, x[:, :2].astype("int64")], "y": y})
    assert described(several) == (
        [((None, 4), "float32"), ((None, 2), "int64")],
        ((None, 1), "float32"),
    )


def test_inputs_without_plain_tensor_shapes_give_no_batch():
    ragged = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1], [2, 3]])).batch(2)
    sparse = tf.data.Dataset.from_tensors(tf.sparse.from_dense(tf.eye(3)))
    for feed in (
        {"x": ragged},
        {"x": sparse},
        {"x": keras.utils.PyDataset()},
        {"x": [[1.0, 2.0]], "y": [1.0]},  # Python lists: no shape to read
        {"x": None},
    ):
        assert symbolic_batch(feed) is None, feed


def test_the_batch_dimension_alone_is_made_unknown():
    assert unknown_batch((64, 4, 3)) == (None, 4, 3)
    assert unknown_batch((64,)) == (None,)
    assert unknown_batch(()) == ()  # a scalar has no batch dimension


@pytest.mark.parametrize(
    "feed",
    [
        pytest.param(lambda: {"x": DATA[0], "y": DATA[1] + 1.0, "batch_size": 16}, id="arrays"),
        pytest.param(
            lambda: {"x": tf.data.Dataset.from_tensor_slices((DATA[0], DATA[1] + 1.0)).batch(16)},
            id="dataset",
        ),
    ],
)
def test_a_model_built_from_its_inputs_shapes_trains_as_keras_builds_it(feed):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    as_keras_builds = fresh_unbuilt_model(strategy)
    first_batch = (tf.constant(DATA[0][:16]), tf.constant(DATA[1][:16] + 1.0))
    # Keras's own build from the batch its throwaway iterator would have taken first: the
    # iterator itself is what crashes a long-lived process (tests/test_tune_strategy.py).
    as_keras_builds._maybe_symbolic_build = build_given(
        as_keras_builds._maybe_symbolic_build, first_batch
    )
    from_spec = fresh_unbuilt_model(strategy)
    assert build_from_spec(from_spec, feed()) and from_spec.built and from_spec.optimizer.built
    histories = [
        model.fit(**feed(), epochs=2, verbose=0).history for model in (as_keras_builds, from_spec)
    ]
    assert histories[0] == histories[1] and histories[0]["loss"][0] > 0


def test_an_unlabeled_input_builds_the_model_from_its_shape():
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.01))  # no loss: its own train_step would compute it
    assert build_from_spec(model, {"x": tf.data.Dataset.from_tensor_slices(DATA[0]).batch(16)})
    assert [tuple(w.shape) for w in model.layers[0].weights] == [(4, 3), (3,)]


class Untouchable:
    """An epoch iterator that fails the test if anything reads it."""

    def __iter__(self):
        raise AssertionError("the build read the epoch iterator")


def test_later_builds_never_read_the_epoch_iterator_and_a_second_call_changes_nothing():
    model = fresh_unbuilt_model(tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert build_from_spec(model, {"x": DATA[0], "y": DATA[1], "batch_size": 16})
    patched = model._maybe_symbolic_build
    model._maybe_symbolic_build(iterator=Untouchable())  # what each later fit calls
    # Once patched, the model is left as it is: the input of a later fit is not read again.
    assert build_from_spec(model, {"x": keras.utils.PyDataset()})
    assert model._maybe_symbolic_build is patched
    assert [tuple(w.shape) for w in model.layers[0].weights] == [(4, 3), (3,)]


def test_without_a_strategy_or_with_a_py_dataset_keras_builds_as_it_does():
    assert not build_from_spec(build(), {"x": DATA[0], "y": DATA[1]})
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = build()
    assert not build_from_spec(model, {"x": keras.utils.PyDataset()})
    assert not build_from_spec(model, {"x": keras.utils.PyDataset()})  # not marked built
