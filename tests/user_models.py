"""Models shaped like the ones people write, after the public Keras examples: a subclassed
autoencoder with its own ``train_step`` and metric tracker on unlabeled data (its decoder is
used only inside ``train_step``, as in the VAE and contrastive examples), and a two-loss model
that reports no ``loss`` key (as a GAN reports ``d_loss``/``g_loss``)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

FEATURES = 16


class Autoencoder(keras.Model):
    """``call`` encodes only; ``train_step`` encodes and decodes, so the decoder's variables
    first exist inside the first training step."""

    def __init__(self, code: int = 4, **kwargs):
        super().__init__(**kwargs)
        self.encoder = keras.layers.Dense(code, activation="relu")
        self.decoder = keras.layers.Dense(FEATURES)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x):
        return self.encoder(x)

    @property
    def metrics(self):
        return [self.loss_tracker]

    def _reconstruction_loss(self, x, training):
        reconstruction = self.decoder(self.encoder(x, training=training))
        return tf.reduce_mean(tf.square(tf.cast(reconstruction, x.dtype) - x))

    def train_step(self, data):
        x = data  # unlabeled: the batch is x itself
        with tf.GradientTape() as tape:
            loss = self._reconstruction_loss(x, True)
        gradients = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_weights, strict=True))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    def test_step(self, data):
        self.loss_tracker.update_state(self._reconstruction_loss(data, False))
        return {"loss": self.loss_tracker.result()}


class BuiltAutoencoder(Autoencoder):
    """The autoencoder as a user writes it to save it (ModelCheckpoint needs a built model):
    calling it on a batch builds the decoder too, as Keras forbids new state in a built model."""

    def build(self, input_shape):
        if not self.encoder.built:
            self.encoder.build(input_shape)
            self.decoder.build((None, self.encoder.units))


class TwoLosses(Autoencoder):
    """Reports ``code_norm`` and ``reconstruction_loss``, and no ``loss``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.norm_tracker = keras.metrics.Mean(name="code_norm")
        self.loss_tracker = keras.metrics.Mean(name="reconstruction_loss")

    @property
    def metrics(self):
        return [self.loss_tracker, self.norm_tracker]

    def train_step(self, data):
        logs = super().train_step(data)
        self.norm_tracker.update_state(tf.reduce_mean(tf.abs(self.encoder(data))))
        return {"reconstruction_loss": logs["loss"], "code_norm": self.norm_tracker.result()}


def build_autoencoder() -> keras.Model:
    model = Autoencoder()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))  # an optimizer only, no loss
    return model


def build_two_losses() -> keras.Model:
    model = TwoLosses()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    return model


def unlabeled(examples: int = 256) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(examples, FEATURES)).astype("float32")


def unlabeled_dataset(examples: int = 256, batch: int = 16) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(unlabeled(examples)).batch(batch)


class LabelledBatches(keras.utils.PyDataset):
    """A PyDataset of ``(x, y)`` batches: ``examples`` rows of ``features``, in batches of
    ``batch_size`` (the last one smaller), built in Python as a loader's ``__getitem__`` is."""

    def __init__(self, batch_size: int = 32, examples: int = 256, features: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.batch_size = batch_size
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(examples, features)).astype("float32")
        self.y = (self.x[:, :1] * 0.5).astype("float32")

    def __len__(self):
        return -(-len(self.x) // self.batch_size)

    def __getitem__(self, index):
        part = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.x[part], self.y[part]


def build_regression(features: int = 8) -> keras.Model:
    model = keras.Sequential(
        [keras.Input((features,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model
