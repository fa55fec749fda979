"""CPU-bound JPEG pipeline: build_pipeline vs a sequential map vs the plain map a user writes.

JPEGs are written to a temporary folder; each example is read, decoded, resized, randomly
cropped and flipped, then batched. Three pipelines of the same work:

- sequential: one example at a time (tf.data's automatic map parallelisation and prefetch
  injection switched off): the floor, and the baseline the guide's speed-ups are quoted against;
- plain: ``ds.map(load).map(augment).batch(32)`` with TensorFlow's default options, as a user
  writes it. tf.data (2.21) parallelises the stateless ``load`` map by itself
  (``map_parallelization``); the augmentation uses stateful random ops, so it stays sequential;
- builder: ``build_pipeline`` (parallel read map, parallel maps, parallel batch, prefetch).

``--stateless`` drops the augmentation, so every map is stateless and tf.data parallelises
the whole plain pipeline by itself. None caches: every epoch decodes every file. Each run is
one epoch timed with ``benchmark_dataset``; runs alternate, medians of ``--repeats``; "cores
busy" is the process's CPU seconds per wall second during the run. Before timing, each
pipeline's stages as tf.data ran them (after its graph rewrites) are printed. With the
augmentation, its map alone is also timed on decoded images held in memory, as the plain
pipeline runs it (sequentially): the ceiling of the plain pipeline on any number of cores.

Run: ``python benchmarks/pipeline_jpeg.py [--images 768] [--size 384] [--repeats 5] [--stateless]``
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
    plain_pipeline,
    sequential_pipeline,
    write_jpegs,
)

from tfthroughput import benchmark_dataset, build_pipeline  # noqa: E402

RESIZE_TO, CROP_TO, BATCH_SIZE = 160, 128, 32


def what_tf_data_ran(dataset, batches=3):
    """The stages tf.data ran after its own graph rewrites, source first, with parallelism.

    Read from the iterator's autotuning model (``tf.data.experimental.get_model_proto``), so it
    shows what the optimisations made of the pipeline, e.g. a plain map made parallel.
    """
    iterator = iter(dataset)
    for _ in range(batches):
        next(iterator)
    model = tf.data.experimental.get_model_proto(iterator)
    stages, node_id = [], model.output
    while node_id is not None and node_id in model.nodes:
        node = model.nodes[node_id]
        # `state_value` is the setting in force; `value` is only the autotuning model's own
        # estimate (1 for a MapAndBatch that runs 2 calls at once).
        params = {p.name: p for p in node.parameters}
        parallelism = ""
        if "parallelism" in params:
            setting = params["parallelism"]
            tuned = ", tuned" if setting.tunable else ""
            parallelism = f"(parallelism={setting.state_value:g}{tuned})"
        stages.append(node.name + parallelism)
        node_id = node.inputs[0] if node.inputs else None
    return " -> ".join(reversed(stages))


def sequential_stage_ceiling(paths, labels, repeats):
    """Images/s of the plain pipeline's augmentation alone, run as tf.data runs it there.

    The decoded images come from an in-memory cache filled beforehand, so only the stateful
    augmentation map (which tf.data leaves sequential) and the batch are timed. The plain
    pipeline can never deliver more than this, however many cores decode for it.
    """
    decoded = plain_pipeline(paths, labels, RESIZE_TO, None, BATCH_SIZE).unbatch().cache()
    for _ in decoded:  # fill the cache
        pass
    # Five passes over the cache per run: one pass takes only a tenth of a second.
    augmented = decoded.repeat(5).map(make_augment(CROP_TO)).batch(BATCH_SIZE)
    print(f"augmentation alone tf.data ran: {what_tf_data_ran(augmented)}")
    return statistics.median(
        benchmark_dataset(augmented).elements_per_second for _ in range(repeats)
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=768)
    parser.add_argument("--size", type=int, default=384, help="JPEG side in pixels")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--stateless", action="store_true", help="no random augmentation: only stateless maps"
    )
    args = parser.parse_args(argv)
    # Other processes on the same cores move every figure; the load says how much.
    print(f"CPU cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}")
    crop_to = None if args.stateless else CROP_TO

    with tempfile.TemporaryDirectory() as folder:
        paths, labels = write_jpegs(folder, args.images, args.size)
        makers = {
            "sequential": lambda: sequential_pipeline(
                paths, labels, RESIZE_TO, crop_to, BATCH_SIZE
            ),
            "plain map": lambda: plain_pipeline(paths, labels, RESIZE_TO, crop_to, BATCH_SIZE),
            "builder": lambda: build_pipeline(
                os.path.join(folder, "*.jpg"),
                labels=labels,
                read_fn=tf.io.read_file,
                preprocess_fn=make_decode(RESIZE_TO),
                augment_fn=None if crop_to is None else make_augment(crop_to),
                batch_size=BATCH_SIZE,
            ),
        }
        rates = {name: [] for name in makers}
        cores = {name: [] for name in makers}
        for name, make in makers.items():  # warm-up: first runs pay for tracing and page cache
            benchmark_dataset(make())
            print(f"{name:<10} tf.data ran: {what_tf_data_ran(make())}")
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
        ceiling = None if args.stateless else sequential_stage_ceiling(paths, labels, 5)
    median = {name: statistics.median(values) for name, values in rates.items()}
    busy = {name: statistics.median(values) for name, values in cores.items()}
    for name, rate in median.items():
        print(f"{name:<10} median {rate:,.1f} images/s, {busy[name]:.2f} cores busy")
    if ceiling is not None:
        per_core = median["builder"] / busy["builder"]
        print(
            f"the plain map's sequential augmentation alone: {ceiling:,.1f} images/s, its "
            f"ceiling on any machine; the builder does {per_core:,.1f} images/s per busy core, "
            f"so past about {ceiling / per_core:.0f} cores the plain map stops scaling and the "
            "builder (augmentation in parallel) does not"
        )
    over_sequential = median["builder"] / median["sequential"]
    over_plain = median["builder"] / median["plain map"]
    maps = "stateless maps only" if args.stateless else "stateful random augmentation"
    print(
        f"SUMMARY jpeg ({maps}): builder {over_sequential:.2f}x the sequential map "
        f"(target >= 1.8), {over_plain:.2f}x the plain ds.map a user writes (TF parallelises "
        f"its stateless maps by itself) on {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
