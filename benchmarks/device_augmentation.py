"""Random augmentation per example in the pipeline vs per batch in the training step.

Both sides train the same small model on the same decoded ``uint8`` images (``--size`` pixels a
side, cached in memory) with the same random augmentation, drawn per example: a random square
crop of 35-100 % of the area resized to ``--out`` pixels, a left-right flip, brightness
(+-0.2) and contrast (0.8-1.2).

- **cpu**: ``build_pipeline(augment_fn=augment_example)``: TensorFlow's per-example image ops
  (``tf.image.random_crop``, ``resize``, ``random_flip_left_right``, ``random_brightness``,
  ``random_contrast``) in a parallel ``map``; ``float32`` batches cross to the model.
- **device**: ``build_pipeline(augment_fn=augment_batch, augment_on="device")`` and
  :class:`~tfthroughput.data.DeviceAugmented`: the same distribution written for batches
  (one ``crop_and_resize`` for all crops, the flip folded into the crop boxes, brightness and
  contrast as one per-example affine map) inside the training step; ``uint8`` batches cross.

The random stream differs (a draw per example either way, from different generators); the
distribution is the same up to the interpolation grid of ``crop_and_resize``.

The two alternate, each on a fresh model warmed up beforehand, ``--repeats`` times; examples/s
is the median over the timed epochs (the first epoch of each fit is not timed). It prints, per
side: examples/s, CPU seconds per 1000 examples of this process (``os.times``; on this CPU-only
machine the training step runs on the same cores, so this is all the work), the input
pipeline alone (examples/s and CPU seconds per 1000 examples when only the dataset is
iterated: the host's share, which is all that stays on the host when a GPU runs the step) and
host-to-device bytes per example (``describe_pipeline``'s bytes per batch / batch size).

Run: ``python benchmarks/device_augmentation.py [--images 1024] [--size 192] [--out 160]
[--batch-size 64] [--epochs 3] [--repeats 5] [--host-threads N] [--jit]``; on a GPU machine
``benchmarks/gpu_device_augmentation.py`` runs it there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfthroughput import build_pipeline, describe_pipeline  # noqa: E402
from tfthroughput.data import DeviceAugmented  # noqa: E402

NUM_CLASSES = 10


def make_augment_example(out):
    """The per-example augmentation, as TensorFlow's image tutorials write it."""

    def augment_example(image, label):
        size = tf.shape(image)[0]
        side = tf.cast(
            tf.sqrt(tf.random.uniform([], 0.35, 1.0)) * tf.cast(size, tf.float32), tf.int32
        )
        image = tf.image.random_crop(image, tf.stack([side, side, 3]))
        image = tf.image.resize(image, (out, out)) / 255.0
        image = tf.image.random_flip_left_right(image)
        image = tf.image.random_brightness(image, 0.2)
        image = tf.image.random_contrast(image, 0.8, 1.2)
        return image, label

    return augment_example


def make_augment_batch(out):
    """The same distribution for a whole batch: every random parameter has the batch axis."""

    def augment_batch(images, labels):
        n = tf.shape(images)[0]
        side = tf.sqrt(tf.random.uniform([n], 0.35, 1.0))  # of the image's side, 0-1
        top = tf.random.uniform([n]) * (1.0 - side)
        left = tf.random.uniform([n]) * (1.0 - side)
        flip = tf.random.uniform([n]) < 0.5  # a box whose x1 > x2 is cropped mirrored
        x1 = tf.where(flip, left + side, left)
        x2 = tf.where(flip, left, left + side)
        boxes = tf.stack([top, x1, top + side, x2], axis=1)
        images = tf.image.crop_and_resize(images, boxes, tf.range(n), (out, out))  # uint8 in
        # Brightness then contrast: c * (x - mean) + mean + delta, one pass, mean per channel.
        contrast = tf.random.uniform([n, 1, 1, 1], 0.8, 1.2)
        delta = tf.random.uniform([n, 1, 1, 1], -0.2, 0.2)
        mean = tf.reduce_mean(images, axis=[1, 2], keepdims=True) / 255.0
        return images * (contrast / 255.0) + ((1.0 - contrast) * mean + delta), labels

    return augment_batch


def make_model(out, jit_compile, trainer_for=None):
    model = keras.Sequential(
        [
            keras.Input((out, out, 3)),
            keras.layers.Conv2D(16, 4, strides=4, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )
    trainer = model if trainer_for is None else DeviceAugmented(model, trainer_for)
    trainer.compile(
        optimizer="sgd",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    return trainer


def cpu_seconds():
    times = os.times()
    return times.user + times.system


class EpochClock(keras.callbacks.Callback):
    """Wall and CPU seconds of each epoch."""

    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = (time.perf_counter(), cpu_seconds())

    def on_epoch_end(self, epoch, logs=None):
        wall, cpu = self._start
        self.epochs.append((time.perf_counter() - wall, cpu_seconds() - cpu))


def fit(dataset, trainer, epochs, steps):
    clock = EpochClock()
    trainer.fit(dataset, epochs=epochs + 1, steps_per_epoch=steps, verbose=0, callbacks=[clock])
    return clock.epochs[1:]  # the first epoch traces the step and fills the buffers


def pipeline_alone(dataset, batches):
    """Examples/s and CPU seconds per example of iterating ``batches`` batches, nothing else."""
    iterator = iter(dataset)
    next(iterator)
    start, cpu = time.perf_counter(), cpu_seconds()
    examples = 0
    for _ in range(batches):
        examples += int(tf.shape(tf.nest.flatten(next(iterator))[0])[0])
    return examples / (time.perf_counter() - start), (cpu_seconds() - cpu) / examples


def batched_alone(augment, dataset, batches):
    """Examples/s and CPU seconds per example of ``augment`` on one shipped batch, compiled."""
    step = tf.function(augment)
    batch = next(iter(dataset))
    step(*batch)[0].numpy()  # trace outside the timing
    start, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(batches):
        step(*batch)[0].numpy()
    examples = batches * int(batch[0].shape[0])
    return examples / (time.perf_counter() - start), (cpu_seconds() - cpu) / examples


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--size", type=int, default=192, help="pixels a side, decoded")
    parser.add_argument("--out", type=int, default=160, help="pixels a side, augmented")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per fit")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--host-threads",
        type=int,
        default=None,
        help="the pipelines' private threadpool (few host cores per GPU); default: shared pool",
    )
    parser.add_argument(
        "--jit",
        action="store_true",
        help="compile the steps with XLA (the device side then fails here: XLA has no "
        "CropAndResize kernel, measured on XLA_CPU_JIT with TF 2.21)",
    )
    args = parser.parse_args(argv)
    # Other processes on the same cores move every figure; the load says how much.
    print(f"CPU cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.2f} at the start")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.images, args.size, args.size, 3), dtype=np.uint8)
    labels = rng.integers(0, NUM_CLASSES, args.images)
    common = dict(
        cache=True,
        shuffle_buffer=args.images,
        repeat=True,
        batch_size=args.batch_size,
        threadpool_size=args.host_threads,
    )
    sides = {
        "cpu": build_pipeline(
            (images, labels), augment_fn=make_augment_example(args.out), **common
        ),
        "device": build_pipeline(
            (images, labels),
            augment_fn=make_augment_batch(args.out),
            augment_on="device",
            **common,
        ),
    }
    steps = args.images // args.batch_size
    host = {}
    for name, dataset in sides.items():
        shipped = describe_pipeline(dataset).bytes_per_batch / args.batch_size
        rate, host[name] = pipeline_alone(dataset, 2 * steps)
        print(
            f"{name}: pipeline alone {rate:.0f} examples/s, {1000 * host[name]:.2f} CPU s per "
            f"1000 examples (what stays on the host); host to device {shipped:,.0f} bytes per "
            "example"
        )
    rate, cpu = batched_alone(make_augment_batch(args.out), sides["device"], steps)
    print(
        f"device: the batched augmentation alone, compiled, on this CPU: {rate:.0f} examples/s, "
        f"{1000 * cpu:.2f} CPU s per 1000 examples (vs {1000 * host['cpu']:.2f} per example "
        "in the pipeline above, augmentation included)"
    )
    runs = {name: [] for name in sides}
    for repeat in range(args.repeats):
        for name, dataset in sides.items():
            device = dataset if name == "device" else None
            trainer = make_model(args.out, args.jit, device)
            epochs = fit(dataset, trainer, args.epochs, steps)
            runs[name].extend(epochs)
        print(
            f"repeat {repeat + 1}: "
            + " | ".join(
                f"{name} "
                + " ".join(
                    f"{steps * args.batch_size / w:.0f}" for w, _ in runs[name][-args.epochs :]
                )
                + " examples/s"
                for name in sides
            )
            + f"; load {os.getloadavg()[0]:.2f}"
        )
    rates, cpus = {}, {}
    for name, epochs in runs.items():
        rates[name] = statistics.median(steps * args.batch_size / wall for wall, _ in epochs)
        cpus[name] = statistics.median(1000 * cpu / (steps * args.batch_size) for _, cpu in epochs)
        print(f"{name}: {rates[name]:.0f} examples/s, {cpus[name]:.2f} CPU s per 1000 examples")
    ratio = rates["device"] / rates["cpu"]
    print(
        f"SUMMARY device augmentation: {ratio:.2f}x the examples/s of per-example augmentation "
        f"on the CPU ({rates['device']:.0f} vs {rates['cpu']:.0f}; {args.size} px -> "
        f"{args.out} px, batch {args.batch_size}; target >= 1.5); CPU s per 1000 examples "
        f"{cpus['device']:.2f} vs {cpus['cpu']:.2f}, left on the host with a GPU "
        f"{1000 * host['device']:.2f} vs {1000 * host['cpu']:.2f}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
