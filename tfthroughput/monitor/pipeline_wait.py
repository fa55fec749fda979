"""The time a step spends waiting for its batches, timed by ``tf.data`` itself.

A ``LatencyStatsDataset`` reads the clock around each ``GetNext`` of the pipeline under it and
adds the span, in microseconds, to a histogram of the stats aggregator that a
``SetStatsAggregatorDataset`` above it hands down; one read of the aggregator's summary gives
the histogram's sum. Both are C++ dataset ops of TensorFlow's experimental ``tf.data``
statistics (raw ops, with no public Python API since TensorFlow 2.3 but still in the wheel):
no function runs per batch, where a stage of ``map`` functions on the step's thread cost tens
of microseconds a batch (``docs/benchmarks.md``, ``input_wait_cost.py``).

With an aggregator set, ``tf.data``'s own stages under it record their statistics too (a
prefetch buffer's use, a map function's time) on the threads that run them. Imported only
where TensorFlow is.
"""

from __future__ import annotations

import functools
import itertools
import os
import weakref

import tensorflow as tf
from tensorflow.core.framework import summary_pb2
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.ops import gen_dataset_ops
from tensorflow.python.ops import gen_experimental_dataset_ops as stats_ops

# The histogram's tag; each timer has an aggregator of its own, so one tag serves all.
_TAG = "tfthroughput_wait"
_NAMES = itertools.count()


class PipelineWait:
    """The seconds spent in the ``GetNext`` calls of the pipelines it times, since it was made
    or last reset. Raises where this TensorFlow lacks the statistics ops."""

    def __init__(self) -> None:
        # A name of its own: eager kernels are cached by their attributes, and one shared
        # aggregator would sum the waits of every pipeline timed in the process.
        name = f"tfthroughput_wait_{os.getpid()}_{next(_NAMES)}"
        self._aggregator = stats_ops.stats_aggregator_handle(shared_name=name)
        self._since: tuple[float, int] = (0.0, 0)
        # The resource manager holds the aggregator until destroyed: destroyed with the timer
        # (which the pipelines it times keep).
        weakref.finalize(self, _destroy, self._aggregator)

    def timed(
        self, dataset: tf.data.Dataset, prefetch: bool = False, end: bool = False
    ) -> tf.data.Dataset:
        """``dataset`` with each of its ``GetNext`` calls timed under this timer's aggregator;
        its elements unchanged. With ``prefetch``, after a ``prefetch(AUTOTUNE)`` added to
        ``dataset``; with ``end``, ending in a ``prefetch(0)`` (one that passes each element
        through, on the same thread, and stops ``tf.data`` injecting one of its own).

        The stages are made by one call of a graph function kept for the pipeline's element
        structure: made one by one, eagerly, they were the largest part of the set-up of every
        ``evaluate`` and ``predict`` call (``docs/benchmarks.md``)."""
        return _Timed(dataset, self, prefetch, end)

    def seconds(self) -> float:
        """Seconds waited since the timer was made or reset (one read of the aggregator)."""
        return self._totals()[0] - self._since[0]

    def batches(self) -> tuple[int, int]:
        """The elements taken through the timed pipelines (``GetNext`` calls that gave one)
        since the timer was made, and how many of them came before its last reset (one read
        of the aggregator)."""
        return self._totals()[1], self._since[1]

    def reset(self) -> None:
        self._since = self._totals()

    def _totals(self) -> tuple[float, int]:
        """Seconds waited and elements taken since the timer was made."""
        summary = summary_pb2.Summary.FromString(
            stats_ops.stats_aggregator_summary(self._aggregator).numpy()
        )
        for value in summary.value:
            if value.tag == _TAG:
                return value.histo.sum / 1e6, int(value.histo.num)
        return 0.0, 0  # nothing asked for yet


def _destroy(aggregator: tf.Tensor) -> None:
    try:
        # A collection may run this while a function is traced: the op runs eagerly, never in
        # the graph being built.
        with tf.init_scope():
            tf.raw_ops.DestroyResourceOp(resource=aggregator, ignore_lookup_error=True)
    except Exception:  # noqa: BLE001 - at interpreter exit TensorFlow may be gone already
        pass


class _Timed(dataset_ops.UnaryUnchangedStructureDataset):
    """The stages of :meth:`PipelineWait.timed` under one Python dataset (made by
    :func:`_stages`)."""

    def __init__(
        self, dataset: tf.data.Dataset, timer: PipelineWait, prefetch: bool, end: bool
    ) -> None:
        self._input_dataset = dataset
        # The ops find the aggregator when an iterator is made: the timer, whose end destroys
        # it, lives as long as the pipeline.
        self._timer = timer
        structure = self._flat_structure
        shapes = tuple(
            None if shape.rank is None else tuple(shape.as_list())
            for shape in structure["output_shapes"]
        )
        stages = _stages(tuple(structure["output_types"]), shapes, prefetch, end)
        super().__init__(dataset, stages(dataset._variant_tensor, timer._aggregator))


@functools.lru_cache(maxsize=64)
def _stages(types: tuple, shapes: tuple, prefetch: bool, end: bool):
    """The timing stages over a pipeline of elements of ``types`` and ``shapes`` as one
    concrete function of its variant and the aggregator, traced once per structure."""
    structure = {"output_types": list(types), "output_shapes": [tf.TensorShape(s) for s in shapes]}

    def stages(variant: tf.Tensor, aggregator: tf.Tensor) -> tf.Tensor:
        if prefetch:
            variant = _prefetch(variant, dataset_ops.AUTOTUNE, structure)
        variant = stats_ops.latency_stats_dataset(variant, tag=_TAG, **structure)
        variant = stats_ops.set_stats_aggregator_dataset(
            variant, aggregator, tag="", counter_prefix="", **structure
        )
        return _prefetch(variant, 0, structure) if end else variant

    return tf.function(stages, autograph=False).get_concrete_function(
        tf.TensorSpec([], tf.variant), tf.TensorSpec([], tf.resource)
    )


def _prefetch(variant: tf.Tensor, buffer_size: int, structure: dict) -> tf.Tensor:
    return gen_dataset_ops.prefetch_dataset(
        variant,
        buffer_size=tf.constant(buffer_size, tf.int64),
        legacy_autotune=buffer_size == dataset_ops.AUTOTUNE,
        **structure,
    )
