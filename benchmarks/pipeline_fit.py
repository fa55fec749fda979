"""End-to-end ``fit`` of a small conv model: build_pipeline vs the same batches in memory.

The JPEG workload (decode, resize, random crop and flip) feeds a small convolutional model.
The builder pipeline caches the decoded, resized images (``cache=True``), so the first epoch
decodes every file and later epochs only augment. The compute-only limit trains on the same
batches already materialised in memory. Both run as one iterator across epochs (``repeat=True``
with ``steps_per_epoch``). Epoch times come from a callback; the two
alternate, each on a fresh model warmed up beforehand (tracing is not timed), median of
``--repeats``. The ratio printed is limit time / builder time (1.0 = the pipeline costs
nothing). On a CPU-only machine preprocessing and training share the same cores, so the first
epoch (decoding every file) cannot reach the limit there; with an accelerator the model runs
elsewhere and the first epoch's decoding overlaps with it.

``--compute-threads N`` gives the training step its own budget of N threads (TensorFlow's
intra- and inter-op threadpools, for both sides), and ``--pipeline-threads M`` gives the
builder's functions a private threadpool of M threads: on 2 cores, ``--compute-threads 1
--pipeline-threads 1`` leaves the second core to the pipeline, the way an accelerator leaves
the CPU to it, and measures what the shared cores cost.

Run: ``python benchmarks/pipeline_fit.py [--images 512] [--epochs 6] [--repeats 7]
[--compute-threads N] [--pipeline-threads M]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _jpeg_workload import NUM_CLASSES, make_augment, make_decode, write_jpegs  # noqa: E402

from tfthroughput import benchmark_dataset, build_pipeline  # noqa: E402

SIZE, RESIZE_TO, CROP_TO, BATCH_SIZE = 192, 72, 64, 32


class EpochTimer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def make_model():
    model = keras.Sequential(
        [
            keras.Input((CROP_TO, CROP_TO, 3)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    # Warm up: trace the train step on one batch of the timed runs' spec, outside the timing.
    x = np.zeros((BATCH_SIZE, CROP_TO, CROP_TO, 3), np.float32)
    y = np.zeros((BATCH_SIZE,), np.int32)
    warm = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH_SIZE, drop_remainder=True)
    model.fit(warm, epochs=1, verbose=0)
    return model


def fit_epochs(data, epochs, **kwargs):
    model = make_model()
    timer = EpochTimer()
    model.fit(data, epochs=epochs, verbose=0, callbacks=[timer], **kwargs)
    return timer.seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--compute-threads", type=int, default=None, help="intra- and inter-op threads"
    )
    parser.add_argument(
        "--pipeline-threads", type=int, default=None, help="the builder's private threadpool"
    )
    args = parser.parse_args(argv)
    if args.compute_threads is not None:  # before any op runs: TensorFlow fixes them then
        tf.config.threading.set_intra_op_parallelism_threads(args.compute_threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.compute_threads)
    budget = (
        f"compute threads {args.compute_threads or 'default'}, "
        f"pipeline threads {args.pipeline_threads or 'shared pool'}"
    )
    # Other processes on the same cores move every figure; the load says how much.
    print(f"CPU cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}; {budget}")
    keras.utils.set_random_seed(0)

    with tempfile.TemporaryDirectory() as folder:
        paths, labels = write_jpegs(folder, args.images, SIZE)

        def builder(repeat=False):
            return build_pipeline(
                os.path.join(folder, "*.jpg"),
                labels=labels,
                read_fn=tf.io.read_file,
                preprocess_fn=make_decode(RESIZE_TO),
                augment_fn=make_augment(CROP_TO),
                cache=True,
                shuffle_buffer=args.images,
                batch_size=BATCH_SIZE,
                drop_remainder=True,
                repeat=repeat,
                threadpool_size=args.pipeline_threads,
            )

        # The limit: one epoch of the builder's batches, materialised in memory as tensors,
        # handed out by a trivial dataset (slicing in-memory tensors costs next to nothing).
        batches = list(builder())
        x = tf.concat([b[0] for b in batches], axis=0)
        y = tf.concat([b[1] for b in batches], axis=0)

        def in_memory():
            return (
                tf.data.Dataset.from_tensor_slices((x, y))
                .batch(BATCH_SIZE, drop_remainder=True)
                .repeat()
                .prefetch(tf.data.AUTOTUNE)
            )

        # Both run as one long iterator over all epochs (`repeat`, `steps_per_epoch`), the way
        # a multi-epoch fit should: a finite dataset makes Keras rebuild the pipeline every
        # epoch, restarting autotuning and refilling the shuffle buffer.
        steps = args.images // BATCH_SIZE

        read = benchmark_dataset(builder())
        print(f"builder pipeline alone, first epoch: {read}")

        limit, built = [], []
        for repeat in range(args.repeats):
            limit.append(fit_epochs(in_memory(), args.epochs, steps_per_epoch=steps))
            built.append(fit_epochs(builder(repeat=True), args.epochs, steps_per_epoch=steps))
            print(
                f"repeat {repeat + 1}: limit "
                + " ".join(f"{s:.3f}" for s in limit[-1])
                + " s | builder "
                + " ".join(f"{s:.3f}" for s in built[-1])
                + " s"
            )
    ratios = []
    for epoch in range(args.epochs):
        limit_s = statistics.median(run[epoch] for run in limit)
        built_s = statistics.median(run[epoch] for run in built)
        ratios.append(limit_s / built_s)
        print(
            f"epoch {epoch + 1}: limit {limit_s:.3f} s, builder {built_s:.3f} s, "
            f"builder reaches {ratios[-1]:.2f} of the limit"
            + (
                " (decodes every file; on CPU it shares the cores with training)"
                if not epoch
                else ""
            )
        )
    # Epochs 2+ together: total limit time over total builder time (medians per epoch).
    later = sum(statistics.median(run[e] for run in limit) for e in range(1, args.epochs)) / sum(
        statistics.median(run[e] for run in built) for e in range(1, args.epochs)
    )
    print(
        f"SUMMARY fit: epochs 2-{args.epochs} reach {later:.2f} of the compute-only limit "
        f"(target >= 0.95; worst epoch {min(ratios[1:]):.2f}); epoch 1 {ratios[0]:.2f}; "
        f"{budget}; load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
