"""The batches of a fit's input known before it starts: arrays, checked against the batches
Keras's own array adapter makes, pass after pass, a fixed batch dimension, and tf.data
pipelines that batch an input of known length, checked against the batches they yield."""

from __future__ import annotations

import numpy as np
import pytest
from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

from tfthroughput.monitor.example_count import Snapshot, examples_through
from tfthroughput.monitor.known_batches import KnownBatches


def _adapter(examples: int, batch_size: int) -> ArrayDataAdapter:
    x = np.arange(examples * 2, dtype="float32").reshape(examples, 2)
    return ArrayDataAdapter(x, x[:, :1], batch_size=batch_size, shuffle=True)


def _sizes_keras_makes(adapter: ArrayDataAdapter, passes: int) -> list[int]:
    return [len(x) for _ in range(passes) for x, _ in adapter.get_numpy_iterator()]


@pytest.mark.parametrize(("examples", "batch_size"), [(10, 4), (12, 4), (3, 8), (1, 1)])
def test_the_sizes_are_those_of_the_batches_keras_makes_pass_after_pass(examples, batch_size):
    adapter = _adapter(examples, batch_size)
    batches = KnownBatches.of(adapter)
    made = _sizes_keras_makes(adapter, passes=3)
    assert [batches.size(index) for index in range(len(made))] == made
    assert [batches.examples(n) for n in range(len(made) + 1)] == [
        sum(made[:n]) for n in range(len(made) + 1)
    ]


def test_what_the_adapter_says_is_read_once():
    assert KnownBatches.of(_adapter(10, 4)) == KnownBatches(batch_size=4, per_pass=3, last=2)
    assert KnownBatches.of(_adapter(12, 4)) == KnownBatches(batch_size=4, per_pass=3, last=4)


def test_any_other_input_is_weighed_batch_by_batch():
    tf = pytest.importorskip("tensorflow")
    from keras.src.trainers.data_adapters.tf_dataset_adapter import TFDatasetAdapter

    dataset = tf.data.Dataset.from_tensor_slices(np.ones((10, 2), "float32")).batch(4)
    assert KnownBatches.of(TFDatasetAdapter(dataset)) is None
    assert KnownBatches.of(object()) is None


def test_a_fixed_batch_dimension_gives_every_batch_its_size():
    batches = KnownBatches.fixed(16)
    assert [batches.size(index) for index in range(3)] == [16, 16, 16]
    assert batches.examples(5) == 80
    assert [KnownBatches.fixed(size) for size in (None, 0, 16.0)] == [None, None, None]


def test_a_snapshot_across_passes_reads_as_the_tally_would():
    batches = KnownBatches(batch_size=4, per_pass=3, last=2)  # 4, 4, 2, 4, 4, 2, ...
    sizes = [batches.size(index) for index in range(12)]
    snapshot = Snapshot(*batches.snapshot(7, recent=4))  # batches 0 to 6: 4, 4, 2, 4, 4, 2, 4
    assert (snapshot.batches, snapshot.examples) == (7, sum(sizes[:7]))
    # Batch i at i % 4: the last four are batches 3 to 6 (4, 4, 2, 4), batch 4 first.
    assert snapshot.recent == (4, 2, 4, 4)
    through = [examples_through(snapshot, n) for n in range(8)]
    assert through == [None, None, None, 10, 14, 18, 20, 24]


def _pipelines(tf):
    """Pipelines whose batches are known, by name: ``(pipeline, examples, batch size)``."""
    rows = tf.data.Dataset.from_tensor_slices(np.ones((10, 2), "float32"))
    shuffled = rows.shuffle(10).map(lambda row: row * 2, num_parallel_calls=2)
    return {
        "batch": rows.batch(4),
        "batch of a mapped shuffle, prefetched": shuffled.batch(4).prefetch(2),
        "parallel batch, cached, options": rows.batch(4, num_parallel_calls=2)
        .cache()
        .with_options(tf.data.Options()),
        "padded batch": rows.padded_batch(4),
        "batch that divides": rows.batch(5).prefetch(-1),
        "drop_remainder": rows.batch(4, drop_remainder=True),
        "one short batch": rows.batch(16),
    }


def test_a_pipeline_batching_an_input_of_known_length_is_cut_as_it_yields_pass_after_pass():
    tf = pytest.importorskip("tensorflow")
    for name, pipeline in _pipelines(tf).items():
        batches = KnownBatches.of_pipeline(pipeline)
        yielded = [len(batch) for _ in range(3) for batch in pipeline]
        assert batches is not None, name
        assert [batches.size(index) for index in range(len(yielded))] == yielded, name
        assert batches.examples(len(yielded)) == sum(yielded), name


def test_a_pipeline_that_may_change_or_move_its_batches_is_weighed():
    tf = pytest.importorskip("tensorflow")
    rows = tf.data.Dataset.from_tensor_slices(np.ones((10, 2), "float32"))
    views = rows.batch(4).map(lambda batch: tf.concat([batch, batch], 0))  # two views: 8, 8, 4
    weighed = {
        "map after the batch": views,
        "shuffle after the batch": rows.batch(4).shuffle(3),
        "input of unknown length": rows.filter(lambda row: True).batch(4),
        "endless input": rows.repeat().batch(4),
        "repeat after the batch": rows.batch(4).repeat(),
        "take after the batch": rows.batch(4).take(2),
        "unbatched": rows,
        "fewer examples than a batch, dropped": rows.batch(16, drop_remainder=True),
    }
    for name, pipeline in weighed.items():
        assert KnownBatches.of_pipeline(pipeline) is None, name
    assert KnownBatches.of_pipeline(object()) is None
