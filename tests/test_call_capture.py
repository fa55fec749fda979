"""Taking the N-th fit or predict of a running script through autolog's patch of keras.Model:
what is kept, arguments changed by the taker reach Keras, a stop ends the call untrained."""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from tfthroughput.monitor import keras_patch  # noqa: E402
from tfthroughput.monitor.call_capture import CaptureStopsTheScript, capture  # noqa: E402


@pytest.fixture
def patched():
    keras_patch.patch(lambda kind, callbacks, model: None)
    yield
    keras_patch.unpatch()


class _Steps(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1


def _same(weights, others) -> bool:
    return len(weights) == len(others) and all(
        np.array_equal(a, b) for a, b in zip(weights, others, strict=True)
    )


def _model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_the_nth_call_is_kept_with_its_arguments_weights_and_compile_arguments(patched):
    model, taken = _model(), []
    capture("fit", 2, taken.append)
    x, y = np.ones((8, 2), "float32"), np.ones((8, 1), "float32")
    model.predict(x, verbose=0)  # another kind: not counted
    model.fit(x, y, batch_size=4, verbose=0)
    weights = [w.copy() for w in model.get_weights()]
    model.fit(x, y, batch_size=2, epochs=1, verbose=0)

    (call,) = taken
    assert call.kind == "fit" and call.model is model
    assert call.arguments["x"] is x and call.arguments["y"] is y
    assert call.arguments["batch_size"] == 2 and call.arguments["epochs"] == 1
    assert call.compile_arguments["loss"] == "mse"
    assert _same(call.weights, weights)


def test_arguments_the_taker_changes_are_those_keras_runs_with(patched):
    model, steps = _model(), _Steps()

    def take(call):
        call.arguments["batch_size"] = 4

    capture("fit", 1, take)
    x, y = np.ones((16, 2), "float32"), np.ones((16, 1), "float32")
    model.fit(x, y, batch_size=1, callbacks=[steps], verbose=0)

    assert steps.batches == 4  # 16 examples in batches of 4, not 16 of 1


def test_a_stop_ends_the_call_before_anything_is_trained_and_calls_inside_are_not_taken(patched):
    model, inner = _model(), _model()
    before = [w.copy() for w in model.get_weights()]
    taken = []

    def take(call):
        taken.append(call)
        inner.fit(np.ones((4, 2)), np.ones((4, 1)), verbose=0)  # a trial's fit: passes through
        raise CaptureStopsTheScript

    capture("fit", 1, take)
    with pytest.raises(CaptureStopsTheScript):
        model.fit(np.ones((4, 2)), np.ones((4, 1)), verbose=0)

    assert len(taken) == 1
    assert _same(model.get_weights(), before)
    assert inner.optimizer.iterations.numpy() == 1
    keras_patch.unpatch()
    assert keras_patch._call_hook is None
