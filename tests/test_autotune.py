"""measure_pipeline: what AUTOTUNE chose and where the time went, read from real profiler
traces (recorded ones for the time each stage took, live ones for the stages and the values
set by hand), checked against values set by hand and against known sleeps."""

from __future__ import annotations

import dataclasses
import glob
import math
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.data._rewrites import schedulable_cores
from tfthroughput.data.autotune import (
    PipelineMeasurement,
    measure_pipeline,
    measurement_from_trace,
)
from tfthroughput.data.description import describe_pipeline
from tfthroughput.data.pipeline import build_pipeline

SLEEP = 0.005


def _sleepy(x):
    def sleep_then_return(value):
        time.sleep(SLEEP)
        return value

    return tf.ensure_shape(tf.py_function(sleep_then_return, [x], tf.int64), [])


def _by_iterator(measurement: PipelineMeasurement) -> dict:
    return {stage.iterator: stage for stage in measurement.stages}


# Traces recorded once by `measure_pipeline(dataset, 30, log_dir=...)` on the two pipelines
# below (2 cores): the time each stage took is read from them, so what is asserted on it does not
# depend on how loaded the machine running the suite is. The live runs check what does not
# move with the load: the stages, their positions, the values set by hand.
TRACES = Path(__file__).resolve().parent / "data" / "traces"


def _sequential_sleepy_map() -> tf.data.Dataset:
    return tf.data.Dataset.range(1000).map(_sleepy).prefetch(2)


def _parallel_sleepy_map() -> tf.data.Dataset:
    return tf.data.Dataset.range(1000).map(_sleepy, num_parallel_calls=2).prefetch(2)


# The dataset names in each recorded trace (they number every dataset the recording process
# made) and their stage positions.
RECORDED_POSITIONS = {
    "sequential_map": {"RangeDataset:0": 1, "MapDataset:1": 2, "PrefetchDataset:2": 3},
    "parallel_map": {"RangeDataset:3": 1, "ParallelMapDatasetV2:4": 2, "PrefetchDataset:5": 3},
}


def _replayed(name: str) -> PipelineMeasurement:
    path = str(TRACES / f"{name}.xplane.pb")
    return measurement_from_trace(path, RECORDED_POSITIONS[name], 30, 0.2)


def test_a_sequential_slow_map_holds_the_time_it_slept():
    measurement = _replayed("sequential_map")
    stages = _by_iterator(measurement)
    assert list(stages) == ["Range", "Map", "Prefetch"]
    slow = stages["Map"]
    assert slow.positions == (2,)
    assert slow.datasets[0].startswith("MapDataset:")
    # Every GetNext of the map slept SLEEP seconds inside it: a floor the trace must reach.
    assert slow.calls >= 30
    assert slow.busy_seconds >= slow.calls * SLEEP
    assert slow.share > 0.9
    assert measurement.num_batches == 30
    # The consumer waited on the prefetch buffer, which the map could not fill faster.
    assert stages["Prefetch"].wait_seconds >= 25 * SLEEP
    assert stages["Prefetch"].tuned == (("buffer_limit", 2),)


def test_a_parallel_map_is_charged_for_its_function_runs_on_the_thread_pool():
    # The function runs on tf.data's thread pool, not inside any iterator call; the trace
    # links it to the map through the producer event that launched it.
    stages = _by_iterator(_replayed("parallel_map"))
    parallel = stages["ParallelMapV2"]
    assert parallel.busy_seconds >= 30 * SLEEP
    assert parallel.share > 0.9
    assert ("parallelism", 2) in parallel.tuned  # set by hand: what the trace must report


@pytest.mark.parametrize(
    "make, recording",
    [(_sequential_sleepy_map, "sequential_map"), (_parallel_sleepy_map, "parallel_map")],
)
def test_a_live_run_reads_the_same_stages_as_the_recorded_trace(make, recording):
    live = _by_iterator(measure_pipeline(make(), 30))
    recorded = _by_iterator(_replayed(recording))
    assert list(live) == list(recorded)
    for kind, stage in live.items():
        assert stage.positions == recorded[kind].positions
        assert stage.calls >= 30 if kind != "Range" else stage.calls >= 1
        assert [name for name, _ in stage.tuned] == [name for name, _ in recorded[kind].tuned]
    assert sum(stage.share for stage in live.values()) == pytest.approx(1.0)
    if "ParallelMapV2" in live:
        assert ("parallelism", 2) in live["ParallelMapV2"].tuned


def test_fixed_and_autotuned_values(tmp_path):
    paths = []
    for i in range(4):
        path = str(tmp_path / f"part{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for j in range(64):
                writer.write(np.int64(j).tobytes())
        paths.append(path)
    dataset = (
        tf.data.Dataset.from_tensor_slices(paths)
        .interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)
        .shuffle(32, seed=1)
        .map(lambda r: tf.io.decode_raw(r, tf.int64)[0], num_parallel_calls=tf.data.AUTOTUNE)
        .batch(8)
        .prefetch(tf.data.AUTOTUNE)
        .repeat()
    )
    measurement = measure_pipeline(dataset, 40)
    stages = _by_iterator(measurement)
    budget = int(dict(measurement.runtime)["cpu_budget"])
    assert budget == schedulable_cores()
    interleave = stages["ParallelInterleaveV4"]
    assert dict(interleave.fixed)["cycle_length"] == str(math.ceil(budget / 3))
    assert 1 <= dict(interleave.tuned)["parallelism"] <= math.ceil(budget / 3)
    assert dict(stages["Shuffle"].fixed)["buffer_size"] == "32"
    fused = stages["MapAndBatch"]  # tf.data fused the map and the batch
    assert fused.positions == (4, 5)
    assert dict(fused.fixed)["batch_size"] == "8"
    assert 1 <= dict(fused.tuned)["parallelism"] <= budget
    for name, low, high in fused.tuned_range:
        assert low <= dict(fused.tuned)[name] <= high
    assert dict(stages["Prefetch"].tuned)["buffer_limit"] >= 1
    assert sum(stage.share for stage in measurement.stages) == pytest.approx(1.0)


def test_stages_tensorflow_added_and_text():
    dataset = tf.data.Dataset.range(1000).map(lambda x: x + tf.random.uniform([], 0, 2, tf.int64))
    measurement = measure_pipeline(dataset, 10)
    added = measurement.stages[-1]
    assert added.iterator == "Prefetch" and added.positions == ()
    assert added.datasets[0].startswith("inject/prefetch")
    text = str(measurement)
    lines = text.splitlines()
    assert lines[0].startswith("measured 10 batches in ")
    assert "cpu_budget=" in lines[0]
    assert lines[1].split() == [
        "iterator", "stage", "AUTOTUNE", "chose", "fixed", "busy", "s", "share", "waited", "s",
    ]  # fmt: skip
    assert "added by tf.data" in lines[-1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        measurement.num_batches = 1  # type: ignore[misc]


def test_a_short_dataset_and_a_kept_trace(tmp_path):
    measurement = measure_pipeline(tf.data.Dataset.range(5).batch(2), 50, log_dir=str(tmp_path))
    assert measurement.num_batches == 3
    assert glob.glob(str(tmp_path / "plugins" / "profile" / "*" / "*.xplane.pb"))


def test_describe_pipeline_measures_with_its_own_numbering():
    dataset = build_pipeline(
        np.arange(512, dtype=np.int64), preprocess_fn=_sleepy, batch_size=8, repeat=True
    )
    description = describe_pipeline(dataset, measure=10)
    assert description.transformations == ("map", "repeat", "batch", "prefetch")
    stages = _by_iterator(description.measurement)
    assert stages["TensorSlice"].positions == (0,)  # the source given to the builder
    assert stages["ParallelMapV2"].positions == (1,)
    text = str(description)
    assert "What AUTOTUNE chose:" in text
    assert "source" in text.split("What AUTOTUNE chose:")[1]


def test_the_builders_consecutive_maps_run_and_are_measured_as_one_stage():
    dataset = build_pipeline(
        np.arange(256, dtype=np.int64),
        preprocess_fn=_sleepy,
        augment_fn=lambda x: x + 1,
        batch_size=8,
    )
    description = describe_pipeline(dataset, measure=10)
    assert description.transformations == ("map", "map", "batch", "prefetch")
    maps = [stage for stage in description.measurement.stages if stage.iterator == "ParallelMapV2"]
    assert [stage.positions for stage in maps] == [(1, 2)]  # fused by map_fusion


def test_arguments_and_a_busy_profiler(tmp_path):
    with pytest.raises(TypeError, match=r"`dataset` must be a tf.data.Dataset. Received"):
        measure_pipeline([1, 2])
    with pytest.raises(ValueError, match=r"`num_batches` must be a positive int. Received: num_ba"):
        measure_pipeline(tf.data.Dataset.range(3), 0)
    with pytest.raises(ValueError, match=r"`measure` must be a positive int or None"):
        describe_pipeline(build_pipeline(tf.data.Dataset.range(3), batch_size=1), measure=-1)
    tf.profiler.experimental.start(str(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="Another TensorFlow profiler session is running"):
            measure_pipeline(tf.data.Dataset.range(3), 2)
    finally:
        tf.profiler.experimental.stop()
