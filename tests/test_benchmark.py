from __future__ import annotations

import pytest
import tensorflow as tf

from tfthroughput import DatasetBenchmark, benchmark_dataset


class StepClock:
    """Advances by a fixed step on every call, so timings are exact."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        value = self.now
        self.now += self.step
        return value


def test_counts_batches_and_examples_including_a_partial_last_batch():
    result = benchmark_dataset(tf.data.Dataset.range(10).batch(4))
    assert (result.num_batches, result.num_elements) == (3, 10)


def test_unbatched_counts_one_example_per_element():
    result = benchmark_dataset(tf.data.Dataset.range(7), batched=False)
    assert (result.num_batches, result.num_elements) == (7, 7)


def test_rates_follow_the_injected_clock():
    # Clock reads: start=0, after batch 1 -> 1, end -> 2 (steps of 1 s per read).
    result = benchmark_dataset(tf.data.Dataset.range(12).batch(4), clock=StepClock(1.0))
    assert result.first_batch_seconds == 1.0
    assert result.total_seconds == 2.0
    assert result.batches_per_second == pytest.approx(2 / 1.0)
    assert result.elements_per_second == pytest.approx(12 / 2.0)


def test_num_batches_limits_an_infinite_dataset():
    result = benchmark_dataset(tf.data.Dataset.range(3).repeat().batch(2), num_batches=5)
    assert result.num_batches == 5
    assert result.num_elements == 10


def test_result_is_frozen_and_prints_a_summary():
    result = benchmark_dataset(tf.data.Dataset.range(8).batch(4))
    with pytest.raises(AttributeError):
        result.num_batches = 1  # type: ignore[misc]
    assert isinstance(result, DatasetBenchmark)
    assert "2 batches, 8 examples" in str(result)


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"dataset": [1, 2, 3]}, TypeError, "dataset=[1, 2, 3]"),
        ({"num_batches": 0}, ValueError, "num_batches=0"),
        ({"num_batches": 2.5}, TypeError, "num_batches=2.5"),
        ({"num_batches": True}, TypeError, "num_batches=True"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(kwargs, error, fragment):
    arguments = {"dataset": tf.data.Dataset.range(4).batch(2), **kwargs}
    with pytest.raises(error) as info:
        benchmark_dataset(**arguments)
    assert fragment in str(info.value)


def test_infinite_dataset_without_a_limit_is_rejected_early():
    with pytest.raises(ValueError, match="num_batches=None"):
        benchmark_dataset(tf.data.Dataset.range(3).repeat())


def test_empty_dataset_is_rejected():
    with pytest.raises(ValueError, match="yielded no element"):
        benchmark_dataset(tf.data.Dataset.range(0).batch(2))
