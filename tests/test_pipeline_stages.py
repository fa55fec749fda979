"""_PipelineSteps: each step applies one tf.data transformation and records exactly that call."""

from __future__ import annotations

import tensorflow as tf

from tfthroughput.data.stages import _PipelineSteps


def test_each_step_applies_the_method_and_records_its_keyword_arguments():
    steps = _PipelineSteps(tf.data.Dataset.range(10))
    steps.apply("shuffle", reason="mix", buffer_size=4, seed=1, reshuffle_each_iteration=True)
    steps.apply("cache", reason="once", filename="")
    steps.apply("batch", reason="group", batch_size=5, num_parallel_calls=tf.data.AUTOTUNE)
    steps.apply("prefetch", buffer_size=tf.data.AUTOTUNE)

    assert [str(stage) for stage in steps.stages] == [
        "shuffle(buffer_size=4, seed=1, reshuffle_each_iteration=True)",
        "cache(filename='')",
        "batch(batch_size=5, num_parallel_calls=AUTOTUNE)",
        "prefetch(buffer_size=AUTOTUNE)",
    ]
    assert [stage.reason for stage in steps.stages] == ["mix", "once", "group", ""]
    assert sorted(int(x) for batch in steps.dataset for x in batch) == list(range(10))
    assert [tuple(batch.shape) for batch in steps.dataset] == [(5,), (5,)]


def test_minus_one_is_autotune_only_where_tf_data_reads_it_so():
    steps = _PipelineSteps(tf.data.Dataset.range(4))
    steps.apply("shuffle", buffer_size=2, seed=-1)
    assert str(steps.stages[0]) == "shuffle(buffer_size=2, seed=-1)"


def test_parallel_map_names_the_function_and_checks_its_result():
    steps = _PipelineSteps(tf.data.Dataset.range(4))
    steps.parallel_map(lambda x: x + 1, "preprocess_fn", deterministic=True, reason="work")
    assert str(steps.stages[0]) == (
        "map(preprocess_fn, num_parallel_calls=AUTOTUNE, deterministic=True)"
    )
    assert [int(x) for x in steps.dataset] == [1, 2, 3, 4]
