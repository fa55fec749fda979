"""Build-time guards of build_pipeline that need more than a bad argument value."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.data.guards import _batching_stage
from tfthroughput.data.pipeline import build_pipeline


def test_an_already_batched_dataset_with_a_batch_size_is_refused():
    batched = tf.data.Dataset.range(64).batch(8).map(lambda x: x * 2).prefetch(1)
    # The default batch_size would silently make batches of batches, shape (32, 8).
    with pytest.raises(ValueError) as info:
        build_pipeline(batched)
    message = str(info.value)
    assert "`source` is already batched (it has a _BatchDataset stage)" in message
    assert "Pass `batch_size=None` to keep its batches" in message
    assert "Received: batch_size=32, source with element_spec=TensorSpec(shape=(None,)" in message
    with pytest.raises(ValueError, match=r"already batched.*Received: batch_size=4,"):
        build_pipeline(batched, batch_size=4)


def test_batch_size_none_keeps_the_batches_of_an_already_batched_dataset():
    batched = tf.data.Dataset.range(64).batch(8)
    kept = build_pipeline(batched, batch_size=None, deterministic=True)
    assert [batch.numpy().tolist() for batch in kept][:2] == [list(range(8)), list(range(8, 16))]


def test_a_keras_batched_dataset_is_recognised():
    # Keras's dataset utilities batch by default (here 128 windows per batch).
    windows = keras.utils.timeseries_dataset_from_array(np.arange(100), None, sequence_length=10)
    with pytest.raises(ValueError, match="already batched"):
        build_pipeline(windows)


def test_an_unbatched_dataset_is_batched_as_asked():
    rebatched = build_pipeline(tf.data.Dataset.range(64).batch(8).unbatch(), batch_size=32)
    assert [tuple(batch.shape) for batch in rebatched] == [(32,), (32,)]


_RANGE = tf.data.Dataset.range(9)


@pytest.mark.parametrize(
    ("make", "stage"),
    [
        (lambda: tf.data.Dataset.range(9), None),
        (lambda: tf.data.Dataset.range(9).batch(3).unbatch().map(lambda x: x), None),
        (lambda: tf.data.Dataset.range(9).padded_batch(3).prefetch(2), "_PaddedBatchDataset"),
        (lambda: tf.data.Dataset.range(9).ragged_batch(3), "_BatchDataset"),
        (lambda: tf.data.Dataset.zip(_RANGE, _RANGE.batch(3)), "_BatchDataset"),
    ],
)
def test_batching_stage_walks_back_to_the_nearest_batch_or_unbatch(make, stage):
    assert _batching_stage(make()) == stage
