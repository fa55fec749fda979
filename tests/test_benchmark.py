"""benchmark_dataset: exact rates under an injected clock; the clock stops at the last batch."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from fakes import CostClock

from tfthroughput import benchmark_dataset
from tfthroughput.data import DatasetBenchmark


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
    # A known count: the clock is read at the start (0), at batch 1 (1) and at batch 3 (2).
    result = benchmark_dataset(tf.data.Dataset.range(12).batch(4), clock=StepClock(1.0))
    assert result.first_batch_seconds == 1.0
    assert result.total_seconds == 2.0
    # Both rates: the 2 batches (8 examples) after the first, over the 1 s after it.
    assert result.batches_per_second == pytest.approx(2 / 1.0)
    assert result.elements_per_second == pytest.approx(8 / 1.0)


def test_an_unknown_count_reads_the_clock_at_every_batch_and_stops_at_the_last():
    # filter() hides the count: reads at the start (0) and at batches 1, 2, 3 (1, 2, 3); the
    # end-of-data signal that follows is not timed.
    dataset = tf.data.Dataset.range(12).batch(4).filter(lambda batch: True)
    result = benchmark_dataset(dataset, clock=StepClock(1.0))
    assert (result.first_batch_seconds, result.total_seconds) == (1.0, 3.0)
    assert result.batches_per_second == pytest.approx(2 / 2.0)
    assert result.elements_per_second == pytest.approx(8 / 2.0)


def test_a_single_batch_is_rated_over_the_whole_time():
    result = benchmark_dataset(tf.data.Dataset.range(4).batch(4), clock=StepClock(0.5))
    assert result.total_seconds == result.first_batch_seconds == 0.5
    assert (result.batches_per_second, result.elements_per_second) == (2.0, 8.0)


BATCH, BATCHES, DELAY, CLOSE = 4, 15, 0.02, 0.5


def _slow_to_close(clock: CostClock):
    """A source that costs DELAY per batch and CLOSE to release itself (a connection, say), on
    ``clock``: known costs instead of sleeps, so the rates are exact."""

    def generate():
        try:
            for i in range(BATCHES):
                clock.advance(DELAY)
                yield np.full((BATCH,), i)
        finally:
            clock.advance(CLOSE)

    return generate


def _check_rate(dataset, **kwargs):
    clock = CostClock()
    result = benchmark_dataset(dataset(clock), clock=clock, **kwargs)
    assert result.num_batches == BATCHES
    # Timing the close as well would give 14 / (14 * 0.02 + 0.5) = 18 batches/s.
    assert result.first_batch_seconds == pytest.approx(DELAY)
    assert result.total_seconds == pytest.approx(BATCHES * DELAY)
    assert result.batches_per_second == pytest.approx(1.0 / DELAY)
    # The same interval for both rates: examples/s is batches/s times the batch size.
    assert result.elements_per_second == pytest.approx(BATCH / DELAY)
    assert clock() == pytest.approx(BATCHES * DELAY + CLOSE)  # the close did happen, later


def _generated(clock: CostClock):
    spec = tf.TensorSpec((BATCH,), tf.int64)
    dataset = tf.data.Dataset.from_generator(_slow_to_close(clock), output_signature=spec)
    # Costs on one clock add up as if run one after the other: tf.data's injected prefetch
    # would run the generator's end (and its close) ahead, beside the last batch's delivery.
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return dataset.with_options(options)


def test_a_source_slow_to_signal_its_end_is_timed_to_its_last_batch():
    assert _generated(CostClock()).cardinality() == tf.data.UNKNOWN_CARDINALITY  # read to its end
    _check_rate(_generated)


def test_a_source_slow_to_shut_down_is_timed_to_its_last_batch():
    # The count is known: no request after the last batch; the iterator shuts down (closing
    # the generator) after the clock stopped.
    counted = tf.data.experimental.assert_cardinality(BATCHES)
    _check_rate(lambda clock: _generated(clock).apply(counted))
    _check_rate(_generated, num_batches=BATCHES)


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
