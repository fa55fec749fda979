"""The data performance guide's ArtificialDataset workload: naive vs hand-written vs builder.

Workload (https://www.tensorflow.org/guide/data_performance): each "file" takes 30 ms to open
and 15 ms per sample to read; the training loop sleeps 10 ms per sample; two epochs over several
files. The lower bound is the sum of the simulated train steps (reading fully hidden behind
training). Pipelines compared, A/B/C alternated, median of several repeats:

- naive: the files read one after the other (``flat_map``), no prefetch;
- hand-written: the guide's best for this workload, ``interleave(num_parallel_calls=AUTOTUNE)``
  (cycle length = CPU cores), ``cache()``, ``prefetch(AUTOTUNE)``;
- builder: ``build_pipeline(..., read_fn=..., parallel_reads=NUM_FILES, cache=True)``.

Run: ``python benchmarks/pipeline_artificial.py [--files 24] [--samples 3] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tensorflow as tf  # noqa: E402

from tfthroughput import build_pipeline, describe_pipeline  # noqa: E402

OPEN_SECONDS = 0.03
READ_SECONDS = 0.015
STEP_SECONDS = 0.01
EPOCHS = 2


def _generator(num_samples):
    time.sleep(OPEN_SECONDS)  # opening the file
    for sample_idx in range(num_samples):
        time.sleep(READ_SECONDS)  # reading one sample
        yield (sample_idx,)


def artificial_dataset(num_samples):
    """The guide's ``ArtificialDataset``: one slow file of ``num_samples`` samples."""
    return tf.data.Dataset.from_generator(
        _generator,
        output_signature=tf.TensorSpec(shape=(1,), dtype=tf.int64),
        args=(num_samples,),
    )


def naive(files, samples):
    return tf.data.Dataset.range(files).flat_map(lambda _: artificial_dataset(samples))


def hand_written(files, samples):
    return (
        tf.data.Dataset.range(files)
        .interleave(lambda _: artificial_dataset(samples), num_parallel_calls=tf.data.AUTOTUNE)
        .cache()
        .prefetch(tf.data.AUTOTUNE)
    )


def builder(files, samples):
    return build_pipeline(
        tf.data.Dataset.range(files),
        read_fn=lambda _: artificial_dataset(samples),
        parallel_reads=files,  # the files wait rather than compute: read them all at once
        cache=True,
        batch_size=None,
    )


def train(dataset):
    """The guide's ``benchmark()``: a 10 ms train step per sample, two epochs; seconds taken."""
    start = time.perf_counter()
    count = 0
    for _ in range(EPOCHS):
        for _sample in dataset:
            time.sleep(STEP_SECONDS)
            count += 1
    return time.perf_counter() - start, count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--samples", type=int, default=3, help="samples per file")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    makers = {"naive": naive, "hand-written": hand_written, "builder": builder}
    print(describe_pipeline(builder(args.files, args.samples)))
    bound = args.files * args.samples * EPOCHS * STEP_SECONDS
    times = {name: [] for name in makers}
    for repeat in range(args.repeats):
        for name, make in makers.items():  # alternated, fresh pipeline (and cache) each time
            seconds, count = train(make(args.files, args.samples))
            assert count == args.files * args.samples * EPOCHS, (name, count)
            times[name].append(seconds)
            print(f"repeat {repeat + 1}: {name:<12} {seconds:.3f} s")
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"lower bound (sum of train steps): {bound:.3f} s")
    for name, seconds in median.items():
        print(f"{name:<12} median {seconds:.3f} s = {seconds / bound:.2f}x the bound")
    ratio = {name: seconds / bound for name, seconds in median.items()}
    print(
        f"SUMMARY artificial: builder {ratio['builder']:.2f}x bound (target <= 1.4), "
        f"hand-written {ratio['hand-written']:.2f}x, naive {ratio['naive']:.2f}x; "
        f"builder/hand-written time {median['builder'] / median['hand-written']:.2f} (target <= 1)"
    )


if __name__ == "__main__":
    main()
