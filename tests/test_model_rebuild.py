"""The builder `tfthroughput tune SCRIPT` makes from the script's compiled model: a new model
each call, the script's weights and compile arguments, nothing shared with the script's model."""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from tfthroughput.tuning.script.model_rebuild import CannotRebuild, builder  # noqa: E402


def _same(weights, others) -> bool:
    return len(weights) == len(others) and all(
        np.array_equal(a, b) for a, b in zip(weights, others, strict=True)
    )


def _compiled_sequential():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    metric = keras.metrics.MeanAbsoluteError()
    model.compile(keras.optimizers.Adam(0.01), "mse", metrics=[metric], steps_per_execution=2)
    return model


def test_each_build_is_a_new_model_with_the_scripts_weights_and_compile_arguments():
    model = _compiled_sequential()
    weights = [w.copy() for w in model.get_weights()]
    build_model = builder(model, dict(model._compile_config.config), weights)

    first, second = build_model(), build_model()
    assert first is not second and first is not model
    for built in (first, second):
        assert _same(built.get_weights(), weights)
        assert built.steps_per_execution == 2 and built.loss == "mse"
        assert isinstance(built.optimizer, keras.optimizers.Adam)
        assert float(built.optimizer.learning_rate) == pytest.approx(0.01)
        assert built.optimizer is not model.optimizer
    assert first.optimizer is not second.optimizer


def test_training_a_rebuilt_model_leaves_the_scripts_model_as_it_was():
    model = _compiled_sequential()
    before = [w.copy() for w in model.get_weights()]
    trained = builder(model, dict(model._compile_config.config), before)()
    trained.fit(np.ones((8, 4), "float32"), np.ones((8, 1), "float32"), epochs=2, verbose=0)

    assert not _same(trained.get_weights(), before)
    assert _same(model.get_weights(), before)
    assert model.optimizer.iterations.numpy() == 0


class _Scaled(keras.Model):
    """A subclassed model whose get_config carries its constructor's argument."""

    def __init__(self, units=2, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.dense = keras.layers.Dense(units)

    def call(self, x):
        return self.dense(x)

    def get_config(self):
        return {"units": self.units}


class _HoldsState(keras.Model):
    """A subclassed model holding a Python object its config cannot carry."""

    def __init__(self, table):
        super().__init__()
        self.table = table
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)


def test_a_subclassed_model_with_get_config_is_rebuilt_with_its_weights():
    model = _Scaled(units=3)
    model.compile("sgd", "mse")
    model(np.zeros((1, 4), "float32"))
    rebuilt = builder(model, dict(model._compile_config.config), model.get_weights())()

    assert type(rebuilt) is _Scaled and rebuilt.units == 3
    assert _same(rebuilt.get_weights(), model.get_weights())


def test_a_subclassed_model_without_a_config_is_one_message_naming_it_and_the_way_out():
    model = _HoldsState(object())
    model.compile("sgd", "mse")
    with pytest.raises(CannotRebuild) as raised:
        builder(model, dict(model._compile_config.config), None)

    message = str(raised.value)
    assert message.startswith("cannot rebuild the model: _HoldsState (NotImplementedError: ")
    assert "\n" not in message
    assert "give _HoldsState a get_config()" in message
    assert "tfthroughput.tune(build_model, data)" in message


class _OwnStep(keras.Sequential):
    """A Sequential subclass with its own train_step (clone_model alone gives a Sequential)."""

    def train_step(self, data):
        return super().train_step(data)


def test_a_sequential_subclass_keeps_its_class_and_so_its_train_step():
    model = _OwnStep([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    rebuilt = builder(model, dict(model._compile_config.config), model.get_weights())()

    assert type(rebuilt) is _OwnStep
    assert _same(rebuilt.get_weights(), model.get_weights())
