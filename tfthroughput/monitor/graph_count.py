"""The examples a ``fit`` trains under Keras's TensorFlow backend, counted inside the input
graph: one last ``map`` on the pipeline that feeds the training step adds each batch's leading
dimension to a counter variable on the host CPU, read once per window.

Under TensorFlow, Keras feeds every input (arrays, ``tf.data``, a ``PyDataset``, a generator)
to the step as a ``tf.data`` pipeline, which its epoch iterator hands to
``strategy.experimental_distribute_dataset`` when ``fit`` starts. :meth:`GraphCount.attach`
rebuilds that distributed dataset from the same pipeline with the counting stage at its end,
before the strategy splits each global batch between its replicas, so a step counts its
global batch once, short or full. The stage is sequential (it holds state), adds no
prefetching and reads only the batch's shape (``tf.shape``); no batch waits for a device.

The counter is one ``int64`` vector, ``[batches, examples, size of batch i at 2 + i % n]``,
replaced whole per batch, so that one read sees a consistent count
(an ``example_count.Snapshot``'s fields). Imported only where TensorFlow is.
"""

from __future__ import annotations

import threading

import tensorflow as tf

from tfthroughput._validation import first_array


class GraphCount:
    """The counter of one ``fit``'s input pipeline. It holds nothing of the ``fit``'s data:
    the counting pipeline lives and goes with the ``fit``'s epoch iterator.

    Args:
        recent: Batch sizes kept (see :data:`~tfthroughput.monitor.example_count.RECENT`).
    """

    def __init__(self, recent: int) -> None:
        self.state = _host_variable(2 + recent)
        self._recent = recent

    @classmethod
    def attach(cls, epoch_iterator: object, recent: int) -> GraphCount | None:
        """Count what ``epoch_iterator`` (Keras's ``TFEpochIterator``, before its first
        epoch) feeds the training step; ``None`` for a pipeline this cannot count (one the
        user distributed already)."""
        dataset = epoch_iterator.data_adapter.get_tf_dataset()
        strategy = getattr(epoch_iterator, "_distribute_strategy", None)
        if not isinstance(dataset, tf.data.Dataset) or strategy is None:
            return None
        if first_array(dataset.element_spec) is None:
            return None
        count = cls(recent)
        counted = strategy.experimental_distribute_dataset(count.counting(dataset))
        epoch_iterator._distributed_dataset = counted
        return count

    def counting(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """``dataset`` with the counting stage at its end; its elements unchanged."""
        state, recent = self.state, self._recent
        single = type(dataset.element_spec) is not tuple  # as tf.data unpacks: tuples only

        def count(*element):
            batch = element[0] if single else element
            size = tf.shape(first_array(batch), out_type=tf.int64)[0]
            now = state.read_value()
            updated = tf.tensor_scatter_nd_update(
                now, [[0], [1], [2 + now[0] % recent]], tf.stack([now[0] + 1, now[1] + size, size])
            )
            with tf.control_dependencies([state.assign(updated)]):
                return tf.nest.map_structure(_after_count, batch)

        return dataset.map(count)

    def snapshot(self) -> tuple[int, int, tuple[int, ...]]:
        """The count now, one read of the variable (on the host CPU): the fields of an
        ``example_count.Snapshot``, ``(batches, examples, recent)``."""
        values = self.state.numpy().tolist()
        return values[0], values[1], tuple(values[2:])

    def detach(self) -> None:
        """Nothing to put back: the ``fit``'s epoch iterator, with the pipeline, is its own."""


def _after_count(value):
    """``value`` once the count is updated: an identity for tensors; anything else (an empty
    optional, a sparse or ragged tensor) as it is, the count still run by the function's
    automatic control dependencies on stateful operations."""
    return tf.identity(value) if isinstance(value, tf.Tensor) else value


def _host_variable(size: int) -> tf.Variable:
    """A plain ``int64`` variable of zeros on the host CPU, never a strategy's (a ``fit``
    called inside ``strategy.scope()`` would mirror it): a strategy's scope is per thread, so
    inside one it is made on a thread of its own."""
    made: list[tf.Variable] = []

    def make() -> None:
        with tf.device("/CPU:0"):
            made.append(tf.Variable(tf.zeros([size], tf.int64), trainable=False))

    if tf.distribute.has_strategy():
        thread = threading.Thread(target=make, name="tfthroughput-example-count")
        thread.start()
        thread.join()
    else:
        make()
    return made[0]
