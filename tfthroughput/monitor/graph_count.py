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

The same stage times how long the step waited for each batch: the pipeline is
zipped behind a one-op dataset that reads the clock (``tf.timestamp``), so one ``GetNext`` of
the step first reads the clock, then asks the user's pipeline for its batch, and the stage,
run by that same ``GetNext`` as the batch comes out, reads the clock again. ``tf.data`` runs a
zip's inputs in order and a sequential ``map`` on the calling thread, so the difference is the
time the step's own ``get_next`` spent inside the user's pipeline (blocked on its prefetch
buffer, or running its stages where nothing prefetches): the wait for that batch, summed in
nanoseconds. No clock read waits for a device, and nothing is added between steps.

That holds only while the stage runs on the step's thread. tf.data's ``inject_prefetch``
optimisation (on by default) adds a ``prefetch(AUTOTUNE)`` after a pipeline's last stage
unless it is a prefetch, which would run the stage ahead on a thread of its own, timing that
thread's wait instead. So the counted pipeline ends in ``prefetch(0)`` (passes each element
through, no thread), and where tf.data would have injected its prefetch after the user's
pipeline, the stage adds that same ``prefetch(AUTOTUNE)`` there, before itself: the user's
pipeline runs ahead exactly as it would without the monitor.

The stage's functions (the clock, the count) run inline on the thread that asks for the
element, not on TensorFlow's inter-op thread pool as a plain ``Dataset.map`` runs them: the
hand-over to the pool and back was most of the stage's cost per batch, paid on the step's
thread (``docs/benchmarks.md``, ``input_wait_cost.py``).

The counter is one ``int64`` vector, ``[batches, examples, waited nanoseconds, size of batch i
at 3 + i % n]``, replaced whole per batch, so that one read sees a consistent count
(an ``example_count.Snapshot``'s fields, and the wait). Imported only where TensorFlow is.
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
        timed: Whether the stage also times the wait, reported by :meth:`waited` (see the
            module docstring); without it, the counting stage alone.
    """

    def __init__(self, recent: int, timed: bool = True) -> None:
        self.state = _host_variable(_SIZES + recent)
        self._recent = recent
        self.timed = timed

    @classmethod
    def attach(cls, epoch_iterator: object, recent: int, timed: bool = True) -> GraphCount | None:
        """Count what ``epoch_iterator`` (Keras's ``TFEpochIterator``, before its first
        epoch) feeds the training step; ``None`` for a pipeline this cannot count (one the
        user distributed already).

        With ``timed``, the wait is timed too where the step reads the counted pipeline itself:
        not under a ``tf.distribute`` strategy whose distributed dataset prefetches onto its
        devices on threads of its own (the stage would time those threads, not the step).

        An iterator counted before (Keras keeps a ``fit``'s validation iterator from epoch to
        epoch) keeps its counted pipeline and gets its count back from zero: remaking it would
        rebuild Keras's pipeline and trace the stage again at every validation (hundreds of
        milliseconds on a loaded 2-core machine, against a reset's fraction of one)."""
        before = vars(epoch_iterator).get(_COUNTED)
        if before is not None and before[1] is epoch_iterator._distributed_dataset:
            before[0].reset()
            return before[0]
        dataset = getattr(epoch_iterator, "_distributed_dataset", None)
        if not isinstance(dataset, tf.data.Dataset):  # distributed: the pipeline before it
            # (without a strategy it is the adapter's own, which a second call would rebuild)
            dataset = epoch_iterator.data_adapter.get_tf_dataset()
        strategy = getattr(epoch_iterator, "_distribute_strategy", None)
        if not isinstance(dataset, tf.data.Dataset) or strategy is None:
            return None
        if first_array(dataset.element_spec) is None:
            return None
        # Without a strategy, Keras's default one hands the pipeline to the step as it is.
        count = cls(
            recent, timed=timed and type(strategy).__name__ == "_DefaultDistributionStrategy"
        )
        counted = strategy.experimental_distribute_dataset(count.counting(dataset))
        epoch_iterator._distributed_dataset = counted
        setattr(epoch_iterator, _COUNTED, (count, counted))  # goes with the iterator
        return count

    def counting(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """``dataset`` with the counting (and timing) stage at its end; its elements
        unchanged."""
        state, recent = self.state, self._recent

        @tf.autograph.experimental.do_not_convert  # plain graph code: no conversion to pay
        def count(asked, batch):
            size = tf.shape(first_array(batch), out_type=tf.int64)[0]
            waited = _nanoseconds() - asked if asked is not None else tf.constant(0, tf.int64)
            now = state.read_value()
            updated = tf.tensor_scatter_nd_update(
                now,
                [[0], [1], [2], [_SIZES + now[0] % recent]],
                tf.stack([now[0] + 1, now[1] + size, now[2] + waited, size]),
            )
            with tf.control_dependencies([state.assign(updated)]):
                return tf.nest.map_structure(_after_count, batch)

        if not self.timed:  # nothing to keep on the step's thread
            single = type(dataset.element_spec) is not tuple  # as tf.data unpacks: tuples only
            return _inline_map(
                dataset, lambda *element: count(None, element[0] if single else element)
            )
        if _gets_prefetch_injected(dataset):
            # What tf.data would add after the user's last stage, added here, before the stage.
            dataset = dataset.prefetch(tf.data.AUTOTUNE)
        # The clock's dataset goes first: zip asks its inputs for their elements in order.
        clock = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat()
        clock = _inline_map(clock, lambda _: _nanoseconds())
        # A last prefetch of nothing: it passes each element through on the step's thread, and
        # tf.data injects no prefetch after a prefetch, which would run the stage ahead.
        return _inline_map(tf.data.Dataset.zip((clock, dataset)), count).prefetch(0)

    def reset(self) -> None:
        """Back to no batch counted and no time waited (one assignment on the host)."""
        self.state.assign(tf.zeros_like(self.state))

    def snapshot(self) -> tuple[int, int, tuple[int, ...]]:
        """The count now, one read of the variable (on the host CPU): the fields of an
        ``example_count.Snapshot``, ``(batches, examples, recent)``."""
        values = self.state.numpy().tolist()
        return values[0], values[1], tuple(values[_SIZES:])

    def waited(self) -> float | None:
        """Seconds the step has waited for its batches so far, one read of the variable;
        ``None`` where the wait is not timed."""
        return self.state.numpy()[2] / 1e9 if self.timed else None

    def detach(self) -> None:
        """Nothing to put back: the ``fit``'s epoch iterator, with the pipeline, is its own."""


# Where the sizes of the recent batches begin in the counter: after batches, examples, waited.
_SIZES = 3
# The attribute of an epoch iterator holding its count and the counted pipeline it was given.
_COUNTED = "_tfthroughput_count"


def _nanoseconds() -> tf.Tensor:
    """The host's clock now, in nanoseconds (``tf.timestamp`` reads it when the op runs)."""
    return tf.cast(tf.timestamp() * 1e9, tf.int64)


def _inline_map(dataset: tf.data.Dataset, function) -> tf.data.Dataset:
    """``dataset.map(function)`` with ``function`` run on the thread that asks for the element.

    A plain ``map`` hands each call to TensorFlow's inter-op thread pool and waits for it: for
    the stage's few scalar operations that hand-over is most of the cost, paid on the step's
    thread at every batch. ``use_inter_op_parallelism=False`` (what ``tf.data`` itself uses for
    such functions, but not public in ``Dataset.map``) runs them inline; where this TensorFlow
    lacks it, the plain ``map``."""
    try:
        from tensorflow.python.data.ops.map_op import _MapDataset

        return _MapDataset(dataset, function, use_inter_op_parallelism=False)
    except (ImportError, TypeError):
        return dataset.map(function)


def _gets_prefetch_injected(dataset: tf.data.Dataset) -> bool:
    """Whether tf.data's ``inject_prefetch`` (on unless autotuning or it is switched off)
    would add a ``prefetch(AUTOTUNE)`` after ``dataset``: where its last stage, options
    aside, is not a prefetch."""
    options = dataset.options()
    if options.autotune.enabled is False:
        return False
    if options.experimental_optimization.inject_prefetch is False:
        return False
    while type(dataset).__name__ == "_OptionsDataset":
        dataset = dataset._input_dataset
    return type(dataset).__name__ != "_PrefetchDataset"


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
