"""describe_pipeline: the stages and options of what build_pipeline returned."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.data._rewrites import schedulable_cores
from tfthroughput.data.description import (
    PipelineDescription,
    PipelineStage,
    describe_pipeline,
)
from tfthroughput.data.pipeline import build_pipeline

X = np.arange(12, dtype=np.float32)


def _scale(x):
    return x / 255.0


def _flip(x):
    return -x


def test_full_pipeline_is_described_stage_by_stage():
    dataset = build_pipeline(
        X,
        preprocess_fn=_scale,
        augment_fn=_flip,
        batch_fn=_scale,
        cache=True,
        shuffle_buffer=6,
        repeat=2,
        batch_size=4,
        seed=3,
        ram_budget_mib=1024,
    )
    description = describe_pipeline(dataset)
    assert description.source == "in-memory data (12 examples)"
    assert description.transformations == (
        "map",
        "cache",
        "shuffle",
        "repeat",
        "map",
        "batch",
        "map",
        "prefetch",
    )
    assert [stage.function for stage in description.stages if stage.transformation == "map"] == [
        "preprocess_fn",
        "augment_fn",
        "batch_fn",
    ]
    assert str(description.stages[0]) == (
        "map(preprocess_fn, num_parallel_calls=AUTOTUNE, deterministic=False)"
    )
    assert str(description.stages[2]) == (
        "shuffle(buffer_size=6, seed=3, reshuffle_each_iteration=True)"
    )
    assert str(description.stages[-1]) == "prefetch(buffer_size=AUTOTUNE)"
    assert description.options == {
        "deterministic": False,
        "autotune.enabled": True,
        "experimental_optimization.map_fusion": True,
        "autotune.ram_budget": 2**30,
        "threading.private_threadpool_size": None,
    }
    assert description.element_spec == str(dataset.element_spec)
    text = str(description)
    assert text.splitlines()[0] == "source: in-memory data (12 examples)"
    assert " 8. prefetch(buffer_size=AUTOTUNE)" in text.splitlines()
    assert "options: deterministic=False, autotune.enabled=True" in text
    assert "Retuned while the pipeline runs: num_parallel_calls=AUTOTUNE" in text
    assert "Fixed when the dataset was made" not in text  # no interleave here
    assert text.splitlines()[-1] == (
        "describe_pipeline(dataset, measure=N) reports what AUTOTUNE chose."
    )


def test_file_sources_are_described(tmp_path):
    paths = []
    for i in range(3):
        path = str(tmp_path / f"part{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(b"record")
        paths.append(path)
    description = describe_pipeline(
        build_pipeline(str(tmp_path / "*.tfrecord"), batch_size=None, parallel_reads=2)
    )
    assert description.source == "3 files (TFRecord)"
    assert description.transformations == ("interleave", "prefetch")
    assert str(description.stages[0]) == (
        "interleave(TFRecordDataset, cycle_length=2, num_parallel_calls=2, deterministic=False)"
    )
    shuffled = describe_pipeline(build_pipeline(paths, batch_size=None, shuffle_buffer=10))
    # Without a cache the file order is reshuffled each epoch too.
    assert shuffled.transformations == ("shuffle", "interleave", "shuffle", "prefetch")
    assert "cycle_length=AUTOTUNE" in str(shuffled.stages[1])


def test_interleave_cycle_length_is_stated_as_fixed_at_build_time(tmp_path):
    paths = []
    for i in range(3):
        path = str(tmp_path / f"part{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(b"record")
        paths.append(path)
    cycle = math.ceil(schedulable_cores() / 3)  # what TensorFlow fixes AUTOTUNE to
    description = describe_pipeline(build_pipeline(paths, batch_size=None, deterministic=True))
    interleave = description.stages[0]
    assert str(interleave) == (
        f"interleave(TFRecordDataset, cycle_length=AUTOTUNE (fixed at {cycle}), "
        "num_parallel_calls=AUTOTUNE, deterministic=True)"
    )
    files = "one file at a time" if cycle == 1 else f"{cycle} files at once"
    assert interleave.reason.startswith(
        f"reads {files}: cycle_length=AUTOTUNE was fixed to ceil(cores / 3) = {cycle} when "
        "the dataset was made"
    )
    assert "the record order depends on the core count" in interleave.reason
    text = str(description)
    assert "Fixed when the dataset was made: an interleave's cycle length" in text
    assert "reads several files at once" not in text
    # An explicit parallel_reads is what it says.
    explicit = describe_pipeline(build_pipeline(paths, batch_size=None, parallel_reads=3))
    assert "cycle_length=3," in str(explicit.stages[0])


def test_minimal_pipeline_and_deterministic_option():
    description = describe_pipeline(
        build_pipeline(tf.data.Dataset.range(8), batch_size=4, deterministic=True)
    )
    assert description.source == "tf.data.Dataset (8 elements)"
    assert description.transformations == ("batch", "prefetch")
    assert description.options["deterministic"] is True
    assert description.options["autotune.ram_budget"] is None


def test_description_is_frozen():
    description = describe_pipeline(build_pipeline(X, batch_size=2))
    assert isinstance(description, PipelineDescription)
    assert all(isinstance(stage, PipelineStage) for stage in description.stages)
    with pytest.raises(dataclasses.FrozenInstanceError):
        description.source = "other"  # type: ignore[misc]


def test_datasets_not_built_by_the_builder_are_refused():
    built = build_pipeline(X, batch_size=2)
    with pytest.raises(ValueError, match=r"not returned by build_pipeline.*Received: dataset="):
        describe_pipeline(built.take(1))
    with pytest.raises(ValueError, match=r"not returned by build_pipeline"):
        describe_pipeline(tf.data.Dataset.range(3))
    with pytest.raises(TypeError, match=r"Received: dataset=\[1, 2\] of type list"):
        describe_pipeline([1, 2])
