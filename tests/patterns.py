"""Nine training patterns shaped like the public Keras examples, written for this suite (tiny,
no network): each gives a model builder, its training and validation data, and what one epoch
trains. tests/test_patterns.py runs each through GPUMonitor, lint_pipeline, diagnose and tune.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from user_models import BuiltAutoencoder, LabelledBatches, unlabeled

BATCH = 16


@dataclass(frozen=True)
class Pattern:
    """One way people train.

    Attributes:
        build: Zero-argument builder of a compiled model (called per use, as tune needs).
        train: What fit gets for training.
        validation: What fit gets as validation_data.
        epoch_examples: Examples one epoch trains.
        batch_size: Examples per (full) batch.
        policy: The global dtype policy it runs under.
        lint_rules: What lint_pipeline finds in a tf.data input.
        fit_kwargs: More arguments of the monitored ``fit`` (``class_weight``).
    """

    build: Callable[[], keras.Model]
    train: Any
    validation: Any
    epoch_examples: int
    batch_size: int = BATCH
    policy: str = "float32"
    lint_rules: tuple[str, ...] = ()
    fit_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def is_tf_data(self) -> bool:
        return isinstance(self.train, tf.data.Dataset)

    @property
    def is_arrays(self) -> bool:
        """Whether ``train`` is NumPy arrays ``(x, y)``, fed with ``batch_size``."""
        return isinstance(self.train, tuple)

    def fit_arguments(self) -> dict[str, Any]:
        """What ``fit`` gets for training: ``x``, ``y`` and ``batch_size`` for arrays."""
        if self.is_arrays:
            x, y = self.train
            return {"x": x, "y": y, "batch_size": self.batch_size, **self.fit_kwargs}
        return {"x": self.train, **self.fit_kwargs}

    def diagnose_arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``diagnose``'s data: ``(x, y)`` with ``batch_size`` for arrays, else the data."""
        if self.is_arrays:
            return self.train, {"batch_size": self.batch_size}
        return (self.train,), {}

    def tune_arguments(self) -> dict[str, Any]:
        """``tune``'s data: ``data`` (with ``batch_size`` for arrays)."""
        return {"data": self.train, **({"batch_size": self.batch_size} if self.is_arrays else {})}


def _rng():
    return np.random.default_rng(0)


def images() -> Pattern:
    """Image classification with augmentation layers in the model (RandomFlip, RandomRotation,
    Rescaling), as in the "image classification from scratch" example."""
    x = _rng().integers(0, 255, size=(96, 16, 16, 3)).astype("float32")
    y = _rng().integers(0, 4, size=(96,))

    def build():
        inputs = keras.Input((16, 16, 3))
        h = keras.layers.RandomFlip("horizontal")(inputs)
        h = keras.layers.RandomRotation(0.1)(h)
        h = keras.layers.Rescaling(1.0 / 255)(h)
        h = keras.layers.Conv2D(4, 3, activation="relu")(h)
        h = keras.layers.GlobalAveragePooling2D()(h)
        model = keras.Model(inputs, keras.layers.Dense(4)(h))
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    train = tf.data.Dataset.from_tensor_slices((x[:64], y[:64])).batch(BATCH)
    val = tf.data.Dataset.from_tensor_slices((x[64:], y[64:])).batch(BATCH)
    return Pattern(build, train, val, 64)


def text() -> Pattern:
    """Text classification with TextVectorization mapped over the dataset, as in the "text
    classification from scratch" example."""
    words = np.array(["good", "bad", "fine", "awful", "great", "poor", "nice", "meh"])
    rng = _rng()
    sentences = [" ".join(rng.choice(words, size=6)) for _ in range(96)]
    labels = np.array([s.count("good") + s.count("great") > 1 for s in sentences], "float32")
    vectorize = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=8)
    vectorize.adapt(sentences)

    def dataset(part):
        strings = tf.data.Dataset.from_tensor_slices((sentences[part], labels[part]))
        return strings.batch(BATCH).map(lambda s, y: (vectorize(s), y))

    def build():
        model = keras.Sequential(
            [
                keras.Input((8,), dtype="int64"),
                keras.layers.Embedding(20, 4),
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(1),
            ]
        )
        model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
        return model

    # The vectorising map has no num_parallel_calls, and lint_pipeline says so.
    return Pattern(
        build, dataset(slice(0, 64)), dataset(slice(64, 96)), 64, lint_rules=("sequential-map",)
    )


def timeseries() -> Pattern:
    """Forecasting with timeseries_dataset_from_array and an LSTM, as in the weather example."""
    series = np.sin(np.arange(160, dtype="float32") / 5)[:, None]

    def windows(start, end):
        return keras.utils.timeseries_dataset_from_array(
            series[start:end],
            series[start + 8 : end + 8, 0],
            sequence_length=8,
            batch_size=BATCH,
        )

    def build():
        model = keras.Sequential([keras.Input((8, 1)), keras.layers.LSTM(4), keras.layers.Dense(1)])
        model.compile("adam", "mse")
        return model

    # 71 rows give 64 windows of 8: four full batches.
    return Pattern(build, windows(0, 71), windows(80, 119), 64)


def autoencoder() -> Pattern:
    """A subclassed model with its own train_step/test_step and metric tracker, compiled with
    an optimizer only, on unlabeled data: the shape of the VAE and contrastive examples."""
    x = unlabeled(96)

    def build():
        model = BuiltAutoencoder()
        model.compile(optimizer=keras.optimizers.Adam(1e-3))
        model(x[:1])  # built, as ModelCheckpoint needs (tests/test_custom_train_step.py
        # covers the model whose decoder first appears inside its first train_step)
        return model

    train = tf.data.Dataset.from_tensor_slices(x[:64]).batch(BATCH)
    return Pattern(build, train, tf.data.Dataset.from_tensor_slices(x[64:]).batch(BATCH), 64)


def dict_inputs() -> Pattern:
    """Structured data: a dict of named features, a StringLookup and a Normalization in the
    model, as in the "structured data classification" example."""
    rng = _rng()
    colors = rng.choice(np.array(["red", "green", "blue"]), size=96)
    sizes = rng.normal(size=96).astype("float32")
    labels = ((colors == "red") & (sizes > 0)).astype("float32")

    def build():
        color = keras.Input((1,), dtype="string", name="color")
        size = keras.Input((1,), name="size")
        one_hot = keras.layers.StringLookup(
            vocabulary=["red", "green", "blue"], output_mode="one_hot"
        )(color)
        normal = keras.layers.Normalization(mean=0.0, variance=1.0)(size)
        h = keras.layers.Concatenate()([one_hot, normal])
        model = keras.Model({"color": color, "size": size}, keras.layers.Dense(1)(h))
        model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
        return model

    def dataset(part):
        features = {"color": colors[part, None], "size": sizes[part, None]}
        return tf.data.Dataset.from_tensor_slices((features, labels[part])).batch(BATCH)

    return Pattern(build, dataset(slice(0, 64)), dataset(slice(64, 96)), 64)


def py_dataset() -> Pattern:
    """A keras.utils.PyDataset with worker threads, its last batch smaller (100 examples)."""

    def build():
        model = keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
        )
        model.compile("adam", "mse")
        return model

    train = LabelledBatches(batch_size=BATCH, examples=100, workers=2)
    return Pattern(build, train, LabelledBatches(batch_size=BATCH, examples=32), 100)


def from_generator() -> Pattern:
    """tf.data.Dataset.from_generator over a Python function yielding examples, batched."""
    rng = _rng()
    x = rng.normal(size=(96, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)

    def dataset(part):
        def examples():
            yield from zip(x[part], y[part], strict=True)

        signature = (tf.TensorSpec((8,), tf.float32), tf.TensorSpec((1,), tf.float32))
        return tf.data.Dataset.from_generator(examples, output_signature=signature).batch(BATCH)

    def build():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        return model

    # Keras 3 counts one optimizer step more than it trains on data of unknown length (the
    # monitor counts the steps trained), and lint_pipeline sees the Python generator.
    return Pattern(
        build,
        dataset(slice(0, 64)),
        dataset(slice(64, 96)),
        64,
        lint_rules=("sequential-generator",),
    )


def mixed_bfloat16() -> Pattern:
    """A model built under a global mixed_bfloat16 policy, its output layer in float32."""
    x = _rng().normal(size=(96, 8)).astype("float32")
    y = x[:, :1] * 0.5

    def build():
        model = keras.Sequential(
            [
                keras.Input((8,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(1, dtype="float32"),
            ]
        )
        model.compile("adam", "mse")
        return model

    train = tf.data.Dataset.from_tensor_slices((x[:64], y[:64])).batch(BATCH)
    val = tf.data.Dataset.from_tensor_slices((x[64:], y[64:])).batch(BATCH)
    return Pattern(build, train, val, 64, policy="mixed_bfloat16")


def arrays() -> Pattern:
    """NumPy arrays, ``fit(x, y, batch_size=16)``, as most tutorials and first models train."""
    x = _rng().normal(size=(96, 8)).astype("float32")
    y = x[:, :1] * 0.5

    def build():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile("adam", "mse")
        return model

    return Pattern(build, (x[:64], y[:64]), (x[64:], y[64:]), 64)


PATTERNS = {
    "images": images,
    "text": text,
    "timeseries": timeseries,
    "autoencoder": autoencoder,
    "dict_inputs": dict_inputs,
    "py_dataset": py_dataset,
    "from_generator": from_generator,
    "mixed_bfloat16": mixed_bfloat16,
    "arrays": arrays,
}
