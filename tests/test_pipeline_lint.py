"""lint_pipeline: one real pipeline per finding, a clean builder pipeline, and what tf.data
rewrites by itself checked against the pipeline the profiler sees running."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.data._rewrites import schedulable_cores
from tfthroughput.data.autotune import measure_pipeline
from tfthroughput.data.lint import LintFinding, PipelineLint, lint_pipeline, random_stages
from tfthroughput.data.pipeline import build_pipeline


def double(x):
    return tf.cast(x, tf.float32) * 2.0


def jitter(x):
    return tf.cast(x, tf.float32) + tf.random.uniform([])


def _range(n=64):
    return tf.data.Dataset.range(n)


def _only(lint: PipelineLint, rule: str) -> LintFinding:
    assert lint.rules == (rule,), str(lint)
    return lint.findings[0]


@pytest.fixture(scope="module")
def record_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("records")
    paths = []
    for i in range(4):
        path = str(folder / f"part{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for j in range(8):
                writer.write(f"{i}-{j}".encode())
        paths.append(path)
    return paths


# ----------------------------------------------------------------------- one per finding


def test_no_final_prefetch_after_an_asynchronous_last_stage():
    lint = lint_pipeline(_range().map(double, num_parallel_calls=tf.data.AUTOTUNE))
    finding = _only(lint, "no-final-prefetch")
    assert (finding.position, finding.op) == (2, "ParallelMapDatasetV2")
    assert finding.stage == "stage 2: map(double) (ParallelMapDatasetV2)"
    assert "inject_prefetch adds no prefetch" in finding.problem
    assert ".prefetch(tf.data.AUTOTUNE)" in finding.fix


def test_no_final_prefetch_when_autotuning_is_off():
    options = tf.data.Options()
    options.autotune.enabled = False
    dataset = _range().batch(8).with_options(options)
    finding = _only(lint_pipeline(dataset), "no-final-prefetch")
    assert (finding.position, finding.op) == (2, "BatchDatasetV2")
    assert "tf.data adds none (autotuning is off)" in finding.problem


def test_a_synchronous_last_stage_gets_tensorflows_own_prefetch():
    lint = lint_pipeline(_range().batch(8))
    assert lint.findings == ()
    assert lint.runtime == (
        "tf.data appends prefetch(AUTOTUNE) after stage 2: batch (BatchDatasetV2) (its "
        "inject_prefetch rewrite, on by default with autotuning, because that stage is "
        "synchronous).",
    )


def test_sequential_map_of_a_stateful_function():
    dataset = _range().map(jitter).batch(8).prefetch(1)
    finding = _only(lint_pipeline(dataset), "sequential-map")
    assert finding.stage == "stage 2: map(jitter) (MapDataset)"
    assert "stateful ops (RandomUniform)" in finding.problem
    assert "num_parallel_calls=tf.data.AUTOTUNE" in finding.fix
    assert "augment_fn" in finding.fix


def test_sequential_map_of_whole_batches():
    def slow_batch(batch):
        return tf.py_function(lambda b: b, [batch], tf.int64)

    finding = _only(lint_pipeline(_range().batch(8).map(slow_batch).prefetch(1)), "sequential-map")
    assert finding.stage == "stage 3: map(slow_batch) (MapDataset)"
    assert "this per-batch map runs one batch at a time" in finding.problem
    assert "stateful ops (EagerPyFunc)" in finding.problem
    assert "batch_fn" in finding.fix


def test_sequential_map_with_one_parallel_call_or_synchronous():
    one = _range().map(double, num_parallel_calls=1).prefetch(1)
    assert "num_parallel_calls=1" in _only(lint_pipeline(one), "sequential-map").problem
    synchronous = _range().map(double, synchronous=True).prefetch(1)
    assert "synchronous=True" in _only(lint_pipeline(synchronous), "sequential-map").problem


def test_plain_map_of_a_stateless_function_is_parallelised_by_tensorflow():
    lint = lint_pipeline(_range().map(double).prefetch(1))
    assert lint.findings == ()
    assert lint.runtime[0].startswith("stage 2: map(double) (MapDataset) runs in parallel anyway")
    # Switching the rewrite off makes the same map sequential, and the lint says why.
    options = tf.data.Options()
    options.experimental_optimization.map_parallelization = False
    off = lint_pipeline(_range().map(double).prefetch(1).with_options(options))
    assert "map_parallelization is off" in _only(off, "sequential-map").problem


def test_cache_after_a_random_map_and_after_batch():
    finding = _only(
        lint_pipeline(
            _range().map(jitter, num_parallel_calls=2, deterministic=False).cache().prefetch(1)
        ),
        "cache-after-random",
    )
    assert finding.stage == "stage 3: cache (CacheDatasetV2)"
    assert "stage 2: map(jitter) (ParallelMapDatasetV2) (random ops)" in finding.problem
    shuffled = lint_pipeline(_range().shuffle(64, seed=1).cache().prefetch(1))
    assert "(a shuffle)" in _only(shuffled, "cache-after-random").problem
    batched = _only(lint_pipeline(_range().batch(8).cache().prefetch(1)), "cache-after-batch")
    assert "caches whole batches from stage 2: batch (BatchDatasetV2)" in batched.problem
    assert ".cache().shuffle(...).batch(...)" in batched.fix


def test_random_stages_are_the_shuffles_and_the_maps_with_random_ops():
    dataset = _range().map(jitter).shuffle(8, seed=1).map(double).batch(4)
    assert random_stages(dataset) == (
        "stage 2: map(jitter) (MapDataset)",
        "stage 3: shuffle (ShuffleDatasetV3)",
    )
    assert random_stages(_range().map(double).batch(4)) == ()
    # One order kept for every pass: a cache after it freezes nothing.
    fixed_order = _range().shuffle(8, reshuffle_each_iteration=False).map(double).batch(4)
    assert random_stages(fixed_order) == ()
    assert "cache-after-random" not in lint_pipeline(fixed_order.cache().prefetch(1)).rules


def test_shuffle_after_batch_and_shuffle_buffer_smaller_than_a_batch():
    after = _only(
        lint_pipeline(_range().batch(8).shuffle(4, seed=1).prefetch(1)), "shuffle-after-batch"
    )
    assert (after.position, after.op) == (3, "ShuffleDatasetV3")
    small = _only(
        lint_pipeline(_range().shuffle(6, seed=1).batch(16).prefetch(1)), "small-shuffle-buffer"
    )
    assert "holds 6 examples, fewer than one batch of 16" in small.problem
    assert lint_pipeline(_range().shuffle(64, seed=1).batch(16).prefetch(1)).findings == ()


def test_a_shuffle_of_file_names_is_not_compared_with_the_batch_of_records(record_files):
    # The tf.data guide's own pattern: shuffle every file name, then read records from them.
    files = tf.data.Dataset.from_tensor_slices(record_files)
    for read in (
        lambda names: names.interleave(tf.data.TFRecordDataset, cycle_length=2),
        lambda names: names.flat_map(tf.data.TFRecordDataset),
    ):
        pipeline = read(files.shuffle(len(record_files), seed=1)).batch(8).prefetch(1)
        assert "small-shuffle-buffer" not in lint_pipeline(pipeline).rules
    # After the records are read, a shuffle smaller than the batch is still found.
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=2)
    small = lint_pipeline(records.shuffle(4, seed=1).batch(8).prefetch(1))
    assert "small-shuffle-buffer" in small.rules


def test_interleave_over_files_with_cycle_length_one(record_files):
    files = tf.data.Dataset.from_tensor_slices(record_files)
    one = files.interleave(tf.data.TFRecordDataset, cycle_length=1, num_parallel_calls=1)
    finding = _only(lint_pipeline(one.prefetch(1)), "sequential-file-reads")
    assert finding.op == "ParallelInterleaveDatasetV4"
    assert "cycle length is 1, so it reads one file at a time" in finding.problem
    assert "parallel_reads=N" in finding.fix
    # TFRecordDataset over a list without num_parallel_reads is a flat_map: one file at a time.
    flat = _only(
        lint_pipeline(tf.data.TFRecordDataset(record_files).prefetch(1)), "sequential-file-reads"
    )
    assert flat.op == "FlatMapDataset"
    # With cycle_length=AUTOTUNE the cycle length is fixed at build time to ceil(cores / 3).
    autotuned = tf.data.TFRecordDataset(record_files, num_parallel_reads=tf.data.AUTOTUNE)
    lint = lint_pipeline(autotuned.prefetch(1))
    expected = math.ceil(schedulable_cores() / 3)
    assert f"its cycle length, {expected}, was fixed when the dataset was made" in lint.runtime[0]
    assert lint.rules == (("sequential-file-reads",) if expected == 1 else ())
    assert (
        lint_pipeline(
            files.interleave(
                tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2
            ).prefetch(1)
        ).findings
        == ()
    )


def test_deterministic_parallel_stage_with_an_unseeded_shuffle():
    dataset = _range().shuffle(64).map(double, num_parallel_calls=2, deterministic=True)
    finding = _only(lint_pipeline(dataset.batch(8).prefetch(1)), "deterministic-without-seed")
    assert finding.stage == "stage 3: map(double) (ParallelMapDatasetV2)"
    assert "(deterministic=True)" in finding.problem
    assert "stage 2: shuffle (ShuffleDatasetV3) shuffles without a seed" in finding.problem
    # tf.data's default order counts too; a seed or deterministic=False clears the finding.
    default = _range().shuffle(64).map(double, num_parallel_calls=2).batch(8).prefetch(1)
    assert (
        "Options.deterministic=True"
        in _only(lint_pipeline(default), "deterministic-without-seed").problem
    )
    seeded = _range().shuffle(64, seed=7).map(double, num_parallel_calls=2, deterministic=True)
    assert lint_pipeline(seeded.batch(8).prefetch(1)).findings == ()
    free = _range().shuffle(64).map(double, num_parallel_calls=2, deterministic=False)
    assert lint_pipeline(free.batch(8).prefetch(1)).findings == ()


def test_per_example_work_after_batch():
    def per_example(batch):
        return tf.map_fn(lambda x: x * 2, batch)

    dataset = _range().batch(8).map(per_example, num_parallel_calls=2).prefetch(1)
    finding = _only(lint_pipeline(dataset), "per-example-work-after-batch")
    assert finding.stage == "stage 3: map(per_example) (ParallelMapDatasetV2)"
    assert "tf.map_fn" in finding.problem
    assert "batch_fn" in finding.fix
    unbatched = _only(
        lint_pipeline(_range().batch(8).unbatch().prefetch(1)), "per-example-work-after-batch"
    )
    assert unbatched.op == "UnbatchDataset"
    # A vectorised map after batch is what batch_fn is for: no finding.
    assert (
        lint_pipeline(_range().batch(8).map(double, num_parallel_calls=2).prefetch(1)).findings
        == ()
    )


def test_from_generator_read_sequentially_and_sharded():
    def generate():
        yield from range(16)

    spec = tf.TensorSpec([], tf.int64)
    single = tf.data.Dataset.from_generator(generate, output_signature=spec)
    finding = _only(lint_pipeline(single.batch(4).prefetch(1)), "sequential-generator")
    assert finding.stage == "stage 1: from_generator (FlatMapDataset)"
    assert "one Python generator" in finding.problem
    sharded = tf.data.Dataset.range(4).interleave(
        lambda i: tf.data.Dataset.from_generator(generate, output_signature=spec),
        cycle_length=4,
        num_parallel_calls=4,
    )
    assert lint_pipeline(sharded.batch(4).prefetch(1)).findings == ()


# -------------------------------------------------------------------------------- clean


def test_a_full_build_pipeline_has_no_findings():
    dataset = build_pipeline(
        np.arange(256, dtype=np.float32),
        preprocess_fn=double,
        augment_fn=jitter,
        batch_fn=double,
        cache=True,
        shuffle_buffer=256,
        repeat=True,
        batch_size=16,
    )
    lint = lint_pipeline(dataset)
    assert lint.findings == ()
    assert [stage.split(" (")[0] for stage in lint.stages] == [
        "from_tensor_slices",
        "map(preprocess_fn)",
        "cache",
        "shuffle",
        "repeat",
        "map(augment_fn)",
        "batch",
        "map(batch_fn)",
        "prefetch",
    ]
    assert str(lint).splitlines()[1] == "no findings"


def test_text_and_frozen_result():
    lint = lint_pipeline(_range().map(jitter).batch(8).prefetch(1))
    text = str(lint)
    assert text.splitlines()[0] == "pipeline: range -> map(jitter) -> batch -> prefetch"
    assert "1 finding(s):" in text
    assert "1. stage 2: map(jitter) (MapDataset)\n  problem: this per-example map" in text
    with pytest.raises(dataclasses.FrozenInstanceError):
        lint.findings = ()  # type: ignore[misc]


def test_dataset_type_is_checked():
    with pytest.raises(
        TypeError, match=r"`dataset` must be a tf.data.Dataset. Received: dataset=\[1\]"
    ):
        lint_pipeline([1])


# ------------------------------------------------ what the lint predicts is what TF runs


@pytest.mark.parametrize(
    "make, runs",
    [
        # A stateless map: parallelised by tf.data (map_parallelization), no prefetch added.
        (lambda: _range(4096).map(double), ["Range", "ParallelMapV2"]),
        # A random map stays sequential; tf.data appends a prefetch after it.
        (lambda: _range(4096).map(jitter), ["Range", "Map", "Prefetch"]),
        # map + batch is fused into one asynchronous stage: no prefetch added.
        (lambda: _range(4096).map(double).batch(4), ["Range", "MapAndBatch"]),
    ],
)
def test_runtime_predictions_match_the_profiled_pipeline(make, runs):
    dataset = make()
    lint = lint_pipeline(dataset)
    measured = [stage.iterator for stage in measure_pipeline(dataset, 20).stages]
    assert measured == runs
    assert ("no-final-prefetch" in lint.rules) == ("Prefetch" not in runs)
    assert any("appends prefetch" in note for note in lint.runtime) == ("Prefetch" in runs)
