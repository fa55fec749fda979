"""The demo's task: decoding, augmentation, the two pipelines it compares, and the small CNN."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfthroughput.data.pipeline import build_pipeline
from tfthroughput.demo.synthetic_images import CLASSES

INPUT_SIZE = 48


def decode(data: tf.Tensor, label: tf.Tensor):
    image = tf.io.decode_jpeg(data, channels=3)
    image = tf.image.resize(image, (INPUT_SIZE, INPUT_SIZE)) / 255.0
    return image, label


def augment(image: tf.Tensor, label: tf.Tensor):
    return tf.image.random_flip_left_right(image), label


def naive_pipeline(paths: list[str], labels: np.ndarray, batch_size: int) -> tf.data.Dataset:
    """What many first pipelines look like: sequential map, no cache, no prefetch."""

    def load(path, label):
        return augment(*decode(tf.io.read_file(path), label))

    return tf.data.Dataset.from_tensor_slices((paths, labels)).map(load).batch(batch_size)


def tuned_pipeline(paths: list[str], labels: np.ndarray, batch_size: int) -> tf.data.Dataset:
    return build_pipeline(
        paths,
        labels=labels,
        read_fn=tf.io.read_file,
        preprocess_fn=decode,
        augment_fn=augment,
        cache=True,
        shuffle_buffer=len(paths),
        batch_size=batch_size,
        seed=0,
    )


def small_cnn() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((INPUT_SIZE, INPUT_SIZE, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(len(CLASSES)),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model
