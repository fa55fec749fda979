"""Measure how fast a ``tf.data.Dataset`` produces batches, like ``tfds.benchmark``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import tensorflow as tf

from tfthroughput._validation import check_dataset, check_positive_int
from tfthroughput._validation import leading_dimension as _leading_dimension


@dataclass(frozen=True)
class DatasetBenchmark:
    """What :func:`benchmark_dataset` measured.

    The clock stops when the last batch arrives: the end-of-data signal and the iterator's
    shutdown (a generator closing a connection, TensorFlow stopping its threads) are not
    work the training step waits for, so they are not timed.

    Attributes:
        num_batches: Batches drawn from the dataset.
        num_elements: Examples in those batches (leading dimension of each batch, or one per
            batch when the dataset was benchmarked with ``batched=False``).
        total_seconds: Wall time from creating the iterator to the arrival of the last batch,
            in seconds.
        first_batch_seconds: Latency of the first batch (iterator creation included), in
            seconds. Pipelines that fill a shuffle buffer or a cache pay here.
        first_batch_elements: Examples in the first batch.
    """

    num_batches: int
    num_elements: int
    total_seconds: float
    first_batch_seconds: float
    first_batch_elements: int

    @property
    def steady_seconds(self) -> float:
        """Seconds from the first batch to the last: the interval both rates use."""
        return self.total_seconds - self.first_batch_seconds

    @property
    def batches_per_second(self) -> float:
        """Batches per second after the first batch, over ``steady_seconds``.

        With a single batch there is no steady interval: that batch over ``total_seconds``.
        """
        if self._single_interval:
            return rate(self.num_batches, self.total_seconds)
        return (self.num_batches - 1) / self.steady_seconds

    @property
    def elements_per_second(self) -> float:
        """Examples per second after the first batch, over the same interval as batches/s.

        So ``elements_per_second / batches_per_second`` is the mean batch size after the
        first. With a single batch: its examples over ``total_seconds``.
        """
        if self._single_interval:
            return rate(self.num_elements, self.total_seconds)
        return (self.num_elements - self.first_batch_elements) / self.steady_seconds

    @property
    def _single_interval(self) -> bool:
        return self.num_batches <= 1 or self.steady_seconds <= 0

    def __str__(self) -> str:
        return (
            f"{self.num_batches} batches, {self.num_elements} examples in "
            f"{self.total_seconds:.3f} s; after a first batch of "
            f"{self.first_batch_seconds * 1000:.1f} ms: {self.elements_per_second:,.1f} "
            f"examples/s, {self.batches_per_second:,.2f} batches/s"
        )


def rate(count: int, seconds: float) -> float:
    """``count`` per second over ``seconds``; infinite when no time was measured (a clock that
    did not move), so a rate is never a division by zero. The one rate helper of the package:
    ``benchmark_dataset`` and both diagnoses divide with it.

    Example:
        >>> rate(10, 2.0), rate(3, 0.0)
        (5.0, inf)
    """
    return count / seconds if seconds > 0 else float("inf")


def leading_dimension(batch: object) -> int:
    """The examples in ``batch``: the leading dimension of its first tensor (in ``tf.nest``
    order), or one for a batch of scalars. ``benchmark_dataset`` counts examples with it, and
    the diagnoses read the batch size of a dataset's first batch.

    Example:
        >>> leading_dimension({"image": tf.zeros([8, 4]), "label": tf.zeros([8])})
        8
    """
    size = _leading_dimension(batch)
    return 1 if size is None else size


def benchmark_dataset(
    dataset: tf.data.Dataset,
    num_batches: int | None = None,
    *,
    batched: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> DatasetBenchmark:
    """Iterate a dataset and time it.

    Args:
        dataset: The ``tf.data.Dataset`` to measure. It is iterated eagerly, exactly as
            ``model.fit`` would pull from it.
        num_batches: How many batches to draw. Defaults to ``None``: the whole dataset, which
            must then be finite.
        batched: Defaults to ``True``: each element is a batch and its examples are counted
            from the leading dimension of its first component. ``False`` counts one example
            per element.
        clock: Seconds-returning clock, injectable for tests. Defaults to
            ``time.perf_counter``.

    Returns:
        A frozen :class:`DatasetBenchmark`. Time runs from creating the iterator to the
        arrival of the last batch; ending the data and shutting the iterator down are not
        timed. Both ``batches_per_second`` and ``elements_per_second`` count what arrived
        after the first batch over the time from the first batch to the last
        (``steady_seconds``), so the first batch's latency is reported apart.

    Raises:
        TypeError: If ``dataset`` is not a ``tf.data.Dataset`` or ``num_batches`` is not an int.
        ValueError: If ``num_batches`` is not positive, or the dataset is infinite and no
            ``num_batches`` was given, or it yielded nothing.

    Example:
        >>> ds = tf.data.Dataset.range(64).batch(8)
        >>> result = benchmark_dataset(ds)
        >>> result.num_batches, result.num_elements
        (8, 64)
    """
    dataset = _checked_dataset(dataset, num_batches)
    return _timed_iteration(dataset, batched, clock)


def _checked_dataset(dataset: object, num_batches: object) -> tf.data.Dataset:
    """``dataset`` cut to ``num_batches``; an infinite one needs that count."""
    check_dataset("dataset", dataset)
    check_positive_int("num_batches", num_batches, allow_none=True)
    if num_batches is not None:
        return dataset.take(num_batches)
    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            "`dataset` is infinite (it repeats forever), so `num_batches` must be given. "
            "Received: num_batches=None"
        )
    return dataset


def _timed_iteration(
    dataset: tf.data.Dataset, batched: bool, clock: Callable[[], float]
) -> DatasetBenchmark:
    """One pass over ``dataset``, timed from the iterator's creation to the last batch."""
    # The clock is read as each batch arrives (only at the first and the last when the count
    # is known in advance), and the loop stops at the last batch without asking for more.
    cardinality = int(dataset.cardinality())
    expected = cardinality if cardinality >= 0 else None
    batches = elements = first_batch_elements = 0
    first_batch_seconds = total_seconds = 0.0
    start = clock()
    iterator = iter(dataset)
    for batch in iterator:
        batches += 1
        elements += leading_dimension(batch) if batched else 1
        if batches == 1:
            first_batch_seconds = total_seconds = clock() - start
            first_batch_elements = elements
        elif expected is None or batches == expected:
            total_seconds = clock() - start
        if batches == expected:
            break
    del iterator  # shut down after the clock stopped
    if batches == 0:
        raise ValueError(f"`dataset` yielded no element. Received: dataset={dataset!r}")
    return DatasetBenchmark(
        num_batches=batches,
        num_elements=elements,
        total_seconds=total_seconds,
        first_batch_seconds=first_batch_seconds,
        first_batch_elements=first_batch_elements,
    )
