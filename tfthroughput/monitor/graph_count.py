"""The examples a ``fit`` trains under Keras's TensorFlow backend, counted inside the input
graph: one last ``map`` on the pipeline that feeds the training step adds each batch's leading
dimension to a counter variable on the host CPU, read once per window.

Under TensorFlow, Keras feeds every input (arrays, ``tf.data``, a ``PyDataset``, a generator)
to the step as a ``tf.data`` pipeline, which its epoch iterator hands to
``strategy.experimental_distribute_dataset`` when ``fit`` starts. :meth:`GraphCount.attach`
rebuilds that distributed dataset from the same pipeline with the counting stage at its end,
before the strategy splits each global batch between its replicas, so a step counts its
global batch once, short or full. The stage is sequential (it holds state) and reads only
the batch's shape (``tf.shape``); no batch waits for a device.

The same pipeline times how long the step waited for each batch (where the step reads it
itself: not under a ``tf.distribute`` strategy, whose distributed dataset prefetches onto its
devices on threads of its own): :mod:`tfthroughput.monitor.pipeline_wait` times each
``GetNext`` the step's own ``get_next`` makes of the user's pipeline, with ``tf.data``'s
latency statistics, so no function runs on the step's thread for it. ``tf.data``'s
``inject_prefetch`` (on by default) adds a ``prefetch(AUTOTUNE)`` after a pipeline whose last
stage is not one, which would run the stages after it ahead on a thread of its own: so the
counted pipeline ends in ``prefetch(0)`` (passes each element through, no thread), and the
timing sits after the user's last prefetch, or after the one ``tf.data`` would have injected,
added there: the user's pipeline runs ahead exactly as without the monitor.

The count's function goes under that prefetch, on its thread: run on the step's thread, a
function stage costs each training step far more than the same function in a bare loop of
batches (``docs/benchmarks.md``, ``input_wait_cost.py``); ahead, only its CPU time is left,
on another thread. It then counts batches the step has not taken yet;
:meth:`GraphCount.snapshot` gives the count as of the batches the step has taken (the
timing's own count), taking back the sizes of those run ahead, so every read says what the
step trained, as a count on the step's thread would. The ring keeps room for
:data:`AHEAD` batches run ahead, the most ``tf.data``'s prefetch autotuner doubles its buffer
to; past it the read is the count ahead, and the batches a window needs may be too far back to
tell. Where no prefetch runs (autotuning or ``inject_prefetch`` off, no prefetch at the end),
the count runs on the step's thread after the timing.

Where the batches' sizes are known before the ``fit`` (arrays, a fixed batch dimension, a
``batch`` over an input of known length:
:mod:`tfthroughput.monitor.known_batches`) and the wait is timed, no counting stage is added:
the latency statistics count the batches the step takes, and the sizes give their examples.
A function stage per batch costs a launch-bound ``fit`` several percent even where it does
nothing (``docs/benchmarks.md``, ``input_wait_cost.py``).

The count's function runs inline on the thread that asks for the element, not on
TensorFlow's inter-op thread pool as a plain ``Dataset.map`` runs it: the hand-over to the
pool and back would cost more than the function.

The counter is one ``int64`` vector on the host, ``[batches, examples, size of batch i at
2 + i % slots]``, updated in place by two scatters per batch, cheaper than a read and a
rewrite of the whole vector: the batch's size into its slot first, then the totals. A read
between the two sees a size written for a batch the totals do not hold yet, in the slot of the
batch ``slots`` back, one more than a read uses: every read is a consistent count (an
``example_count.Snapshot``'s fields). Imported only where TensorFlow
is.
"""

from __future__ import annotations

import threading

import tensorflow as tf

from tfthroughput._validation import first_array
from tfthroughput.monitor.known_batches import KnownBatches, recent_sizes
from tfthroughput.monitor.pipeline_wait import PipelineWait


class GraphCount:
    """The counter of one ``fit``'s input pipeline. It holds nothing of the ``fit``'s data:
    the counting pipeline lives and goes with the ``fit``'s epoch iterator.

    Args:
        recent: Batch sizes kept (see :data:`~tfthroughput.monitor.example_count.RECENT`).
        timed: Whether the pipeline also times the wait, reported by :meth:`waited` (see the
            module docstring); without it, the counting stage alone.
        sizes: The batches of the ``fit``'s input, where known: with the wait timed, the
            timing's own count of batches then gives the examples, and no function runs per
            batch.

    Attributes:
        untimed_reason: Why the wait is not timed though asked for, else ``None``.
        state: The counter variable, ``None`` where the batches' sizes are known.
    """

    def __init__(self, recent: int, timed: bool = True, sizes: KnownBatches | None = None) -> None:
        self._recent = recent
        self._wait: PipelineWait | None = None
        self.untimed_reason: str | None = None
        if timed:
            try:
                self._wait = PipelineWait()
            except Exception as error:  # noqa: BLE001 - a TensorFlow without the stats ops
                self.untimed_reason = f"this TensorFlow cannot time it ({type(error).__name__})"
        self._sizes = sizes if self._wait is not None else None
        # Room for the batches run ahead of the step where the timing tells how many it took,
        # and one slot more than a read uses: the one being written (see the module docstring).
        self._slots = recent + (AHEAD if self._wait is not None else 0) + 1
        self.state = None if self._sizes is not None else _host_variable(_SIZES + self._slots)

    @property
    def timed(self) -> bool:
        """Whether the wait is timed (see :meth:`waited`)."""
        return self._wait is not None

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
            recent,
            timed=timed and type(strategy).__name__ == "_DefaultDistributionStrategy",
            sizes=KnownBatches.of(epoch_iterator.data_adapter)
            or KnownBatches.fixed(first_array(dataset.element_spec).shape[0])
            or KnownBatches.of_pipeline(dataset),
        )
        counted = strategy.experimental_distribute_dataset(count.counting(dataset))
        epoch_iterator._distributed_dataset = counted
        setattr(epoch_iterator, _COUNTED, (count, counted))  # goes with the iterator
        return count

    def counting(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """``dataset`` with the counting stage (and the wait's timing) at its end; its
        elements unchanged."""
        if self._sizes is not None:  # the timing counts the batches: nothing to weigh
            return self._timed(dataset, end=True)
        handle, slots = self.state.handle, self._slots
        single = type(dataset.element_spec) is not tuple  # as tf.data unpacks: tuples only

        @tf.autograph.experimental.do_not_convert  # plain graph code: no conversion to pay
        def count(*element):
            batch = element[0] if single else element
            size = tf.shape(first_array(batch), out_type=tf.int64)[0]
            batches = tf.raw_ops.ResourceGather(resource=handle, indices=0, dtype=tf.int64)
            sized = tf.raw_ops.ResourceScatterUpdate(
                resource=handle, indices=_SIZES + batches % slots, updates=size
            )
            with tf.control_dependencies([sized]):  # the size first, then the totals
                counted = tf.raw_ops.ResourceScatterAdd(
                    resource=handle, indices=[0, 1], updates=tf.stack([tf.ones_like(size), size])
                )
            with tf.control_dependencies([counted]):
                return tf.nest.map_structure(_after_count, batch)

        if self._wait is None:  # tf.data injects its prefetch after the count: it runs ahead
            return _inline_map(dataset, count)
        ahead = _under_last_prefetch(dataset, count)
        if ahead is not None:  # run by the prefetch's thread; the timing after the prefetch
            return self._timed(ahead, end=True)
        # No prefetch to run it: on the step's thread as it takes each batch, above the
        # aggregator, which would also time the function into it at every batch.
        return _inline_map(self._timed(dataset), count).prefetch(0)

    def _timed(self, dataset: tf.data.Dataset, end: bool = False) -> tf.data.Dataset:
        """``dataset`` with each ``GetNext`` of it timed, under this count's stats aggregator,
        after the prefetch tf.data would have injected (see the module docstring); with
        ``end``, ending in ``prefetch(0)``."""
        return self._wait.timed(dataset, prefetch=_gets_prefetch_injected(dataset), end=end)

    def reset(self) -> None:
        """Back to no batch counted and no time waited (one assignment on the host, one read
        of the stats aggregator)."""
        if self.state is not None:
            self.state.assign(tf.zeros_like(self.state))
        if self._wait is not None:
            self._wait.reset()

    def snapshot(self) -> tuple[int, int, tuple[int, ...]]:
        """The count now, one read of the variable (on the host CPU): the fields of an
        ``example_count.Snapshot``, ``(batches, examples, recent)``."""
        if self._sizes is not None:
            # Counted from the last reset: Keras starts a new pass over the data there (a
            # validation's or an evaluate's iterator is reset before each call).
            counted, since = self._wait.batches()
            return self._sizes.snapshot(counted - since, self._recent)
        # The batches taken first: the count, read after, has counted each of them already.
        taken = self._wait.batches() if self._wait is not None else None
        values = self.state.numpy().tolist()
        slots = self._slots

        def size_of(index: int) -> int:
            return values[_SIZES + index % slots]

        counted, examples = values[0], values[1]
        if taken is not None and 0 <= counted - (taken[0] - taken[1]) <= AHEAD:
            # The batches run ahead of the step taken back: the count as of what it trained.
            start, counted = counted, taken[0] - taken[1]
            examples -= sum(size_of(index) for index in range(counted, start))
        return counted, examples, recent_sizes(size_of, counted, self._recent)

    def waited(self) -> float | None:
        """Seconds the step has waited for its batches so far, one read of the stats
        aggregator; ``None`` where the wait is not timed."""
        return self._wait.seconds() if self._wait is not None else None

    def detach(self) -> None:
        """Nothing to put back: the ``fit``'s epoch iterator, with the pipeline, is its own."""


# Where the sizes of the recent batches begin in the counter: after batches and examples.
_SIZES = 2
# Batches the count may run ahead of the step and still be taken back: the buffer size up to
# which tf.data's prefetch autotuner doubles (past it, it grows 2,048 at a time, within its
# RAM budget). 16 KiB of counter.
AHEAD = 2048
# The attribute of an epoch iterator holding its count and the counted pipeline it was given.
_COUNTED = "_tfthroughput_count"


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


def _under_last_prefetch(dataset: tf.data.Dataset, function) -> tf.data.Dataset | None:
    """``dataset`` with ``function`` mapped inline under the prefetch that ends it, or under
    the one ``tf.data`` would inject after it, added: run by that prefetch's thread, ahead of
    the step, and the user's pipeline prefetching as before. ``None`` where no prefetch would
    run after it, or this TensorFlow names the stage's fields otherwise."""
    if _gets_prefetch_injected(dataset):
        return _inline_map(dataset, function).prefetch(tf.data.AUTOTUNE)
    last = _past_options(dataset)
    if type(last).__name__ != "_PrefetchDataset":
        return None
    try:
        buffer, source = tf.get_static_value(last._buffer_size), last._input_dataset
    except AttributeError:
        return None
    if buffer is None:
        return None
    # Options set above the prefetch are in the pipeline's merged options: set again above it.
    return _inline_map(source, function).prefetch(int(buffer)).with_options(dataset.options())


def _gets_prefetch_injected(dataset: tf.data.Dataset) -> bool:
    """Whether tf.data's ``inject_prefetch`` (on unless autotuning or it is switched off)
    would add a ``prefetch(AUTOTUNE)`` after ``dataset``: where its last stage, options
    aside, is not a prefetch. The stage is looked at first: merging the pipeline's options
    walks all of it, which a pipeline that ends in a prefetch does not need."""
    if type(_past_options(dataset)).__name__ == "_PrefetchDataset":
        return False
    options = dataset.options()
    return (
        options.autotune.enabled is not False
        and options.experimental_optimization.inject_prefetch is not False
    )


def _past_options(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The pipeline's last stage that is not a ``with_options``."""
    while type(dataset).__name__ == "_OptionsDataset":
        dataset = dataset._input_dataset
    return dataset


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
