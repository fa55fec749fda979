"""Models shaped like the ones people write, after the public Keras examples: a subclassed
autoencoder with its own ``train_step`` and metric tracker on unlabeled data (its decoder is
used only inside ``train_step``, as in the VAE and contrastive examples), and a two-loss model
that reports no ``loss`` key (as a GAN reports ``d_loss``/``g_loss``), and a GAN written as the
Keras examples write one, with optimizers of its own."""

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


class GAN(keras.Model):
    """As keras.io's GAN examples: ``compile`` takes ``d_optimizer`` and ``g_optimizer`` and
    calls ``super().compile()`` without an optimizer (``model.optimizer`` is a default that
    never steps); ``train_step`` steps both of its own."""

    latent = 4

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.generator = keras.Sequential(
            [keras.Input((self.latent,)), keras.layers.Dense(FEATURES)]
        )
        self.discriminator = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def call(self, z):
        return self.generator(z)

    def train_step(self, real):
        batch = tf.shape(real)[0]
        noise = tf.random.normal((batch, self.latent))
        fake = self.generator(noise)
        images = tf.concat([fake, real], axis=0)
        labels = tf.concat([tf.ones((batch, 1)), tf.zeros((batch, 1))], axis=0)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(images))
        weights = self.discriminator.trainable_weights
        self.d_optimizer.apply_gradients(zip(tape.gradient(d_loss, weights), weights, strict=True))
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(tf.zeros((batch, 1)), self.discriminator(self.generator(noise)))
        weights = self.generator.trainable_weights
        self.g_optimizer.apply_gradients(zip(tape.gradient(g_loss, weights), weights, strict=True))
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


def build_gan() -> keras.Model:
    model = GAN()
    model.compile(
        d_optimizer=keras.optimizers.Adam(1e-3),
        g_optimizer=keras.optimizers.Adam(1e-3),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


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
