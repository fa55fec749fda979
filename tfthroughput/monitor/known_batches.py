"""The batch sizes of a ``fit``'s input where they are known before it starts, so that a count
of batches gives its examples exactly without weighing each batch.

Arrays: Keras's ``ArrayDataAdapter`` cuts them into ``num_batches`` batches of ``batch_size``,
the last one short where the examples do not divide (``partial_batch_size``), and its epoch
iterator only starts a new pass over them once a pass is used up (at an epoch's end without
``steps_per_epoch``, or when the steps run past the data with it): every pass is whole, so
batch ``i`` counted from the first is short exactly where ``i % num_batches`` is the last.
Each ``evaluate``, and each validation inside a ``fit``, starts a pass afresh (Keras resets
its iterator, however few ``validation_steps`` the last one took): the count starts there too.
A pipeline whose batch dimension is fixed (``batch(n, drop_remainder=True)``) has every batch
of that size. A pipeline that ends in ``batch(n)`` over an input whose length ``tf.data`` knows
(``cardinality``), followed only by stages that pass each batch through whole (``prefetch``,
``cache``, options), cuts each pass as arrays are cut; Keras reads such an input pass by pass
too, starting a new one after ``cardinality`` batches. Other inputs (a ``map`` or a
``shuffle`` after the batching, an input of unknown length, a ``PyDataset``, a generator) may
batch as they like: they are weighed batch by batch (:mod:`tfthroughput.monitor.graph_count`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# tf.data stages that hand on each batch whole and in order: after the batching stage, they
# keep its sizes. A ``map`` may change a batch's size (one that concatenates two views of
# it does), a ``shuffle`` moves the short batch: either one means weighing each batch.
_WHOLE_BATCH_STAGES = frozenset(
    {"_PrefetchDataset", "_OptionsDataset", "CacheDataset", "_CacheDataset"}
)
_BATCHING_STAGES = frozenset({"_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset"})


@dataclass(frozen=True)
class KnownBatches:
    """The batches of one pass over the input.

    Attributes:
        batch_size: Examples in a full batch.
        per_pass: Batches in a pass.
        last: Examples in a pass's last batch (``batch_size`` where none is short).

    Example:
        >>> batches = KnownBatches(batch_size=4, per_pass=3, last=2)  # 10 examples
        >>> [batches.examples(n) for n in (0, 2, 3, 4, 6)]
        [0, 8, 10, 14, 20]
    """

    batch_size: int
    per_pass: int
    last: int

    @classmethod
    def of(cls, adapter: object) -> KnownBatches | None:
        """The batches of a Keras data adapter over arrays; ``None`` for any other input, or
        where the adapter does not say its batches."""
        if type(adapter).__name__ != "ArrayDataAdapter":
            return None
        try:
            batch_size, per_pass = adapter.batch_size, adapter.num_batches
            last = adapter.partial_batch_size or batch_size
        except Exception:  # noqa: BLE001 - a Keras whose adapter says less: weigh each batch
            return None
        if not all(isinstance(value, int) and value > 0 for value in (batch_size, per_pass)):
            return None
        return cls(batch_size, per_pass, last)

    @classmethod
    def fixed(cls, batch_size: object) -> KnownBatches | None:
        """Batches all of ``batch_size`` examples (a pipeline's fixed batch dimension); ``None``
        where it is not a known size."""
        if not isinstance(batch_size, int) or batch_size <= 0:
            return None
        return cls(batch_size, 1, batch_size)

    @classmethod
    def of_pipeline(cls, dataset: object) -> KnownBatches | None:
        """The batches of a ``tf.data`` pipeline that batches an input of known length
        (``batch``, ``padded_batch``), then only prefetches, caches or sets options; ``None``
        for any other pipeline.

        Example:
            >>> import tensorflow as tf
            >>> examples = tf.data.Dataset.range(10).map(lambda i: i * 2)
            >>> KnownBatches.of_pipeline(examples.batch(4).prefetch(2))
            KnownBatches(batch_size=4, per_pass=3, last=2)
            >>> KnownBatches.of_pipeline(examples.batch(4).map(lambda batch: batch)) is None
            True
        """
        stage = dataset
        while type(stage).__name__ in _WHOLE_BATCH_STAGES:
            stage = getattr(stage, "_input_dataset", None)
        if type(stage).__name__ not in _BATCHING_STAGES:
            return None
        try:  # tf.data's own attributes: a TensorFlow that names them otherwise weighs batches
            batch_size, drop_remainder = int(stage._batch_size), bool(stage._drop_remainder)
            examples = int(stage._input_dataset.cardinality())  # -1 endless, -2 unknown
        except Exception:  # noqa: BLE001
            return None
        if batch_size <= 0 or examples <= 0:
            return None
        whole, remainder = divmod(examples, batch_size)
        if drop_remainder or not remainder:
            return cls(batch_size, whole, batch_size) if whole else None
        return cls(batch_size, whole + 1, remainder)

    def size(self, index: int) -> int:
        """Examples in batch ``index`` (counted from the first, across passes)."""
        return self.last if index % self.per_pass == self.per_pass - 1 else self.batch_size

    def examples(self, batches: int) -> int:
        """Examples in the first ``batches`` batches."""
        return batches * self.batch_size - (batches // self.per_pass) * (
            self.batch_size - self.last
        )

    def snapshot(self, batches: int, recent: int) -> tuple[int, int, tuple[int, ...]]:
        """The fields of an ``example_count.Snapshot`` for the first ``batches`` batches
        (counted from a pass's start): their number, their examples, and the sizes of the last
        ``recent`` of them, batch ``i``'s at ``i % recent``."""
        return batches, self.examples(batches), recent_sizes(self.size, batches, recent)


def recent_sizes(size_of: Callable[[int], int], batches: int, recent: int) -> tuple[int, ...]:
    """A snapshot's ``recent`` field: the sizes of the last ``recent`` of ``batches`` batches,
    batch ``i``'s (``size_of(i)``) at ``i % recent``, zeros where fewer were counted."""
    sizes = [0] * recent
    for index in range(max(0, batches - recent), batches):
        sizes[index % recent] = size_of(index)
    return tuple(sizes)
