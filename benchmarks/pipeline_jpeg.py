"""CPU-bound JPEG pipeline: build_pipeline vs a sequential map, measured side by side.

JPEGs are written to a temporary folder; each example is read, decoded, resized, randomly
cropped and flipped, then batched. The sequential pipeline maps one example at a time (tf.data's
automatic map parallelisation and prefetch injection switched off); the builder reads and maps
in parallel and prefetches. Neither caches: every epoch decodes every file. Each run is one
epoch timed with ``benchmark_dataset``; runs alternate, medians of ``--repeats``.

Run: ``python benchmarks/pipeline_jpeg.py [--images 768] [--size 384] [--repeats 5]``
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

import tensorflow as tf  # noqa: E402
from _jpeg_workload import (  # noqa: E402
    make_augment,
    make_decode,
    sequential_pipeline,
    write_jpegs,
)

from tfthroughput import benchmark_dataset, build_pipeline  # noqa: E402

RESIZE_TO, CROP_TO, BATCH_SIZE = 160, 128, 32


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=768)
    parser.add_argument("--size", type=int, default=384, help="JPEG side in pixels")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"CPU cores: {os.cpu_count()}")

    with tempfile.TemporaryDirectory() as folder:
        paths, labels = write_jpegs(folder, args.images, args.size)
        makers = {
            "sequential": lambda: sequential_pipeline(
                paths, labels, RESIZE_TO, CROP_TO, BATCH_SIZE
            ),
            "builder": lambda: build_pipeline(
                os.path.join(folder, "*.jpg"),
                labels=labels,
                read_fn=tf.io.read_file,
                preprocess_fn=make_decode(RESIZE_TO),
                augment_fn=make_augment(CROP_TO),
                batch_size=BATCH_SIZE,
            ),
        }
        rates = {name: [] for name in makers}
        cores = {name: [] for name in makers}
        for make in makers.values():  # warm-up: first runs pay for tracing and page cache
            benchmark_dataset(make())
        for repeat in range(args.repeats):
            for name, make in makers.items():
                dataset = make()
                cpu = time.process_time()
                result = benchmark_dataset(dataset)
                cpu = time.process_time() - cpu
                assert result.num_elements == args.images, result
                rates[name].append(result.elements_per_second)
                # CPU seconds per wall second: how many cores the pipeline kept busy. On a
                # shared machine the builder's speed-up is bounded by the cores left free.
                cores[name].append(cpu / result.total_seconds)
                print(f"repeat {repeat + 1}: {name:<10} {result}; {cores[name][-1]:.2f} cores busy")
    median = {name: statistics.median(values) for name, values in rates.items()}
    for name, rate in median.items():
        busy = statistics.median(cores[name])
        print(f"{name:<10} median {rate:,.1f} images/s, {busy:.2f} cores busy")
    speedup = median["builder"] / median["sequential"]
    print(
        f"SUMMARY jpeg: builder {speedup:.2f}x the sequential map's images/s on "
        f"{os.cpu_count()} cores (target >= 1.8)"
    )


if __name__ == "__main__":
    main()
