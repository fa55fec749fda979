"""Small Keras models and data shared by the precision and tune tests."""

from __future__ import annotations

import keras
import numpy as np
import pytest


@pytest.fixture
def float32_policy():
    """The test starts under float32 and may not leak a policy to the next."""
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy(before)


def regression_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    return x, y


def tiny_regression_model():
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )


def tiny_mlp(features: int = 16) -> keras.Model:
    """A compiled MLP of ``features`` inputs, 16 hidden units and one output (SGD, MSE)."""
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
    """``examples`` rows of normal features and a target of half the first one."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, features)).astype("float32")
    return x, (x[:, :1] * 0.5).astype("float32")
