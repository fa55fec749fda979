"""The JPEG workload shared by the pipeline benchmarks: files on disk, decode, resize, crop+flip."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

NUM_CLASSES = 2


def write_jpegs(folder, count, size, seed=0):
    """Write ``count`` ``size``x``size`` RGB JPEGs into ``folder``; return (paths, labels)."""
    rng = np.random.default_rng(seed)
    paths, labels = [], []
    y, x = np.mgrid[0:size, 0:size]
    for i in range(count):
        label = i % NUM_CLASSES
        # Smooth gradients plus noise: JPEG-like content, and the class is learnable (the
        # gradient runs along x for class 0, along y for class 1).
        ramp = (x if label == 0 else y) * (255.0 / size)
        image = ramp[..., None] + rng.normal(0, 20, (size, size, 3))
        image = np.clip(image, 0, 255).astype(np.uint8)
        path = os.path.join(folder, f"img_{i:05d}.jpg")
        tf.io.write_file(path, tf.io.encode_jpeg(image, quality=90))
        paths.append(path)
        labels.append(label)
    return paths, labels


def make_decode(resize_to):
    """Deterministic preprocessing: JPEG bytes -> float image of ``resize_to`` pixels a side."""

    def decode(data, label):
        image = tf.io.decode_jpeg(data, channels=3)
        image = tf.image.resize(image, (resize_to, resize_to)) / 255.0
        return image, label

    return decode


def make_augment(crop_to):
    """Random augmentation: a random ``crop_to`` crop and a random left-right flip."""

    def augment(image, label):
        image = tf.image.random_crop(image, (crop_to, crop_to, 3))
        image = tf.image.random_flip_left_right(image)
        return image, label

    return augment


def plain_pipeline(paths, labels, resize_to, crop_to, batch_size):
    """The pipeline a user writes first: ``ds.map(load).map(augment).batch(n)``, TF's defaults.

    With its default optimisations tf.data parallelises by itself a ``map`` whose function is
    stateless (``map_parallelization``: here ``load``, read + decode + resize) and may inject
    a prefetch; the augmentation draws random numbers with stateful ops (``random_crop``), so
    that map stays sequential. ``crop_to=None``: no augmentation map.
    """
    decode = make_decode(resize_to)

    def load(path, label):
        return decode(tf.io.read_file(path), label)

    examples = tf.data.Dataset.from_tensor_slices((paths, labels)).map(load)
    if crop_to is not None:
        examples = examples.map(make_augment(crop_to))
    return examples.batch(batch_size)


def sequential_pipeline(paths, labels, resize_to, crop_to, batch_size):
    """The same maps one example at a time: tf.data's automatic parallelism switched off."""
    options = tf.data.Options()
    # tf.data would otherwise parallelise the stateless map and inject a prefetch by itself.
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    return plain_pipeline(paths, labels, resize_to, crop_to, batch_size).with_options(options)
