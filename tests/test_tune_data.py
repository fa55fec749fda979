"""tune's input kinds (tuning/training/data.py, tuning/inference/data.py): each kind of input
``fit`` and ``predict`` take is read once into an object that answers what the knobs ask."""

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tfthroughput.tuning.inference.data import (  # noqa: E402
    InferenceArrays,
    InferenceDataset,
    inference_data,
)
from tfthroughput.tuning.training.data import (  # noqa: E402
    TrainingArrays,
    TrainingDataset,
    TrainingPyDataset,
    training_data,
)


def _arrays(examples: int = 100, features: int = 3):
    x = np.arange(examples * features, dtype="float32").reshape(examples, features)
    return x, x[:, :1] * 2.0


class _Batches(keras.utils.PyDataset):
    def __init__(self, batches: int):
        super().__init__()
        self._batches = batches

    def __len__(self):
        return self._batches

    def __getitem__(self, index):
        x = np.full((4, 3), index, dtype="float32")
        return x, x[:, :1]


def _first_xs(feed: dict, count: int) -> list[np.ndarray]:
    """The first ``count`` batches' x of a dataset feed, as arrays."""
    return [np.asarray(x) for x, *_ in feed["x"].take(count)]


def test_arrays_are_read_as_fit_reads_them():
    x, y = _arrays(100)
    data = training_data((x, y), 32)
    assert isinstance(data, TrainingArrays)
    assert (data.examples, data.batch_size, data.epoch_batches) == (100, 32, 3)
    assert data.epoch_length(32) == 4  # the partial last batch is a step of fit's epoch
    assert data.shuffled_by_fit and data.rebuildable and data.batch_note is None


def test_an_arrays_feed_is_unshuffled_and_long_enough_for_the_steps():
    x, y = _arrays(100)
    feed = training_data((x, y), 32).feed(32, 10)  # 320 examples: the arrays tiled 4 times
    assert feed["shuffle"] is False and feed["batch_size"] == 32
    assert len(feed["x"]) == 400
    np.testing.assert_array_equal(feed["x"][100:200], x)
    np.testing.assert_array_equal(feed["y"][:100], y)


def test_several_inputs_as_a_list_stay_several_inputs_in_the_rebuilt_source():
    left, right = np.zeros((8, 2), "float32"), np.ones((8, 5), "float32")
    y = np.zeros((8, 1), "float32")
    data = training_data(([left, right], y), 4)
    assert data.examples == 8
    source = data.pipeline_source()
    assert isinstance(source[0], tuple) and len(source[0]) == 2  # a list would be one tensor
    element = next(iter(tf.data.Dataset.from_tensor_slices(source)))
    assert [tuple(part.shape) for part in element[0]] == [(2,), (5,)]
    x_held, _ = data.first_batch()
    assert [part.shape for part in x_held] == [(4, 2), (4, 5)]


def test_unlabeled_arrays_and_sample_weights_are_fed_as_fit_takes_them():
    x, y = _arrays(16)
    unlabeled = training_data(x, 8)
    assert "y" not in unlabeled.feed(8, 2)
    assert unlabeled.pipeline_source() is x
    weights = np.linspace(0, 1, 16).astype("float32")
    weighted = training_data((x, y, weights), 8)
    assert weighted.sample_weight is weights
    assert len(weighted.pipeline_source()) == 3
    np.testing.assert_array_equal(weighted.epoch_feed(8, endless=False)["sample_weight"], weights)


def test_a_batched_dataset_cannot_try_other_batch_sizes_and_says_why():
    x, y = _arrays(100)
    data = training_data(tf.data.Dataset.from_tensor_slices((x, y)).batch(10), None)
    assert isinstance(data, TrainingDataset)
    assert (data.batch_size, data.epoch_batches) == (None, 10)
    assert "already batched" in data.batch_note
    unbatched = training_data(tf.data.Dataset.from_tensor_slices((x, y)), 32)
    assert unbatched.batch_note is None and unbatched.epoch_length(32) == 4
    assert unbatched.epoch_length(64) == 2


def test_replaying_an_unseeded_shuffle_gives_the_same_batches_on_every_pass():
    x, y = _arrays(100)
    shuffled = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(100)
    data = training_data(shuffled, 10)
    # as given, two passes differ
    first, second = _first_xs(data.feed(10, 5), 5), _first_xs(data.feed(10, 5), 5)
    assert any(not np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    replayed, reason = data.replay_feed(10, 5, most_bytes=2**20)
    assert reason == ""
    passes = _first_xs(replayed, 10)  # two passes of the 5 replayed batches
    for a, b in zip(passes[:5], passes[5:], strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_replay_too_large_for_memory_is_refused_with_its_size():
    x, y = _arrays(100)
    data = training_data(tf.data.Dataset.from_tensor_slices((x, y)), 10)
    feed, reason = data.replay_feed(10, 5, most_bytes=100)
    assert feed is None
    assert reason == "its first 5 batches would hold 0 MiB in memory"


def test_a_py_dataset_is_read_as_given_and_not_rebuilt():
    data = training_data(_Batches(6), None)
    assert isinstance(data, TrainingPyDataset)
    assert (data.batch_size, data.epoch_batches, data.rebuildable) == (None, 6, False)
    assert "makes its own batches" in data.batch_note
    assert data.replay_feed(None, 3, 2**20) == (None, "a PyDataset is read as given")
    np.testing.assert_array_equal(data.first_batch()[0], np.zeros((4, 3)))
    with pytest.raises(TypeError, match="not rebuilt"):
        data.pipeline_source()


def test_what_fit_cannot_take_is_refused_naming_the_argument():
    with pytest.raises(TypeError, match="`data` must be what model.fit takes"):
        training_data([1, 2, 3], 8)
    with pytest.raises(ValueError, match="batch_size.*PyDataset"):
        training_data(_Batches(2), 8)


def test_inference_arrays_feed_as_many_batches_as_asked():
    x, _ = _arrays(100)
    data = inference_data(x, 32)
    assert isinstance(data, InferenceArrays)
    feed = data.feed(32, 5)  # 160 examples from 100: the arrays repeated
    assert len(feed["x"]) == 160 and feed["batch_size"] == 32
    assert data.one_batch(32).shape == (32, 3)
    whole, is_whole = data.whole_feed(32, most=1000)
    assert is_whole and whole["x"] is x
    part, is_whole = data.whole_feed(32, most=64)
    assert not is_whole and len(part["x"]) == 64


def test_inference_datasets_repeat_for_the_steps_asked():
    x, _ = _arrays(100)
    data = inference_data(tf.data.Dataset.from_tensor_slices(x), 25)
    assert isinstance(data, InferenceDataset)
    feed = data.feed(25, 9)
    assert feed["steps"] == 9
    assert len(list(feed["x"].take(9))) == 9  # four batches a pass, repeated
    assert data.batch_examples() == 25
