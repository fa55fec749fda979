"""The loss shapes people use, as patterns of the matrix (tests/test_patterns.py): losses added
by layers (``add_loss``: an activity regulariser and a custom layer), a two-output model with a
dict of losses and ``loss_weights``, sample weights from the dataset, ``class_weight`` in
``fit``, and the user's own ``LossScaleOptimizer`` under ``mixed_float16``. Tiny models on 64
examples, so that each costs little of the suite's time."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from patterns import BATCH, Pattern, _rng


def _regression(examples: int = 96) -> tuple[np.ndarray, np.ndarray]:
    x = _rng().normal(size=(examples, 8)).astype("float32")
    return x, x[:, :1] * 0.5


def _split(*arrays: np.ndarray) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    """The first 64 examples to train on and the rest to validate on, in batches."""
    train = tf.data.Dataset.from_tensor_slices(tuple(a[:64] for a in arrays)).batch(BATCH)
    return train, tf.data.Dataset.from_tensor_slices(tuple(a[64:] for a in arrays)).batch(BATCH)


@keras.saving.register_keras_serializable("tfthroughput_tests")
class Smoothness(keras.layers.Layer):
    """A custom layer that adds a loss of its own (``self.add_loss``), as a user writes one."""

    def call(self, inputs):
        self.add_loss(0.01 * keras.ops.mean(keras.ops.square(inputs)))
        return inputs


def add_loss() -> Pattern:
    """Losses added by layers: an ``activity_regularizer`` and a custom layer's ``add_loss``;
    the reported ``loss`` holds them with the compiled one."""
    x, y = _regression()

    def build():
        model = keras.Sequential(
            [
                keras.Input((8,)),
                keras.layers.Dense(8, activity_regularizer=keras.regularizers.L2(0.01)),
                Smoothness(),
                keras.layers.Dense(1),
            ]
        )
        model.compile("adam", "mse")
        return model

    return Pattern(build, *_split(x, y), 64)


def two_outputs() -> Pattern:
    """A functional model with two named outputs, a dict of losses and ``loss_weights``."""
    x, y = _regression()
    labels = (x[:, :1] > 0).astype("float32")

    def build():
        inputs = keras.Input((8,))
        h = keras.layers.Dense(8, activation="relu")(inputs)
        outputs = {
            "value": keras.layers.Dense(1, name="value")(h),
            "sign": keras.layers.Dense(1, name="sign")(h),
        }
        model = keras.Model(inputs, outputs)
        model.compile(
            "adam",
            loss={"value": "mse", "sign": keras.losses.BinaryCrossentropy(from_logits=True)},
            loss_weights={"value": 1.0, "sign": 0.5},
        )
        return model

    def dataset(part):
        targets = {"value": y[part], "sign": labels[part]}
        return tf.data.Dataset.from_tensor_slices((x[part], targets)).batch(BATCH)

    return Pattern(build, dataset(slice(0, 64)), dataset(slice(64, 96)), 64)


def sample_weight() -> Pattern:
    """``(x, y, sample_weight)`` batches: the dataset weighs each example."""
    x, y = _regression()
    weights = np.where(x[:, 0] > 0, 2.0, 0.5).astype("float32")

    def build():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile("adam", "mse")
        return model

    return Pattern(build, *_split(x, y, weights), 64)


def class_weight() -> Pattern:
    """A classifier trained with ``fit(..., class_weight=...)`` (diagnose and tune, which take
    no fit arguments, measure the same steps without the weights)."""
    x, _ = _regression()
    labels = (x[:, 0] > 0.5).astype("int64")  # the rarer class weighs more

    def build():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    return Pattern(build, *_split(x, labels), 64, fit_kwargs={"class_weight": {0: 1.0, 1: 3.0}})


def loss_scale_optimizer() -> Pattern:
    """The user's own ``keras.optimizers.LossScaleOptimizer`` under a global ``mixed_float16``
    policy, as the mixed precision guide writes it for a custom loop or an explicit choice."""
    x, y = _regression()

    def build():
        model = keras.Sequential(
            [
                keras.Input((8,)),
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dense(1, dtype="float32"),
            ]
        )
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
        model.compile(optimizer, "mse")
        return model

    return Pattern(build, *_split(x, y), 64, policy="mixed_float16")


LOSS_PATTERNS = {
    "add_loss": add_loss,
    "two_outputs": two_outputs,
    "sample_weight": sample_weight,
    "class_weight": class_weight,
    "loss_scale_optimizer": loss_scale_optimizer,
}
