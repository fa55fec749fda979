"""The counting stage GPUMonitor adds to a fit's tf.data input under TensorFlow: the elements
pass through unchanged, whatever their structure, and the count is read back exactly."""

from __future__ import annotations

import collections
import gc
import time

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tfthroughput.monitor.example_count import examples_through  # noqa: E402
from tfthroughput.monitor.graph_count import GraphCount  # noqa: E402
from tfthroughput.monitor.known_batches import KnownBatches  # noqa: E402

pytestmark = pytest.mark.tensorflow

Pair = collections.namedtuple("Pair", ["x", "y"])
ROWS = np.arange(30, dtype="float32").reshape(10, 3)


@pytest.mark.parametrize(
    "dataset",
    [
        tf.data.Dataset.from_tensor_slices(ROWS),  # one tensor
        tf.data.Dataset.from_tensor_slices((ROWS, ROWS[:, :1])),  # (x, y)
        tf.data.Dataset.from_tensor_slices(((ROWS,),)),  # a tuple of one tuple
        tf.data.Dataset.from_tensor_slices({"b": ROWS[:, 0], "a": ROWS}),  # dict
        tf.data.Dataset.from_tensor_slices(Pair(ROWS, ROWS[:, 0])),  # a namedtuple
    ],
)
@pytest.mark.parametrize("timed", [True, False])  # with the wait's clock (no strategy), or not
def test_elements_pass_unchanged_and_each_batch_is_counted(dataset, timed):
    batched = dataset.batch(4)  # 4, 4 and a last batch of 2
    count = GraphCount(recent=8, timed=timed)
    counted = count.counting(batched)
    assert counted.element_spec == batched.element_spec
    for mine, theirs in zip(counted, batched, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, mine, theirs)
    snapshot = count.snapshot()
    assert snapshot[:2] == (3, 10)
    assert [examples_through(snapshot, n) for n in (3, 2, 1, 0)] == [10, 8, 4, 0]
    assert (count.waited() is None) is not timed


def test_the_recent_sizes_wrap_around_and_a_read_between_the_counts_two_writes_is_consistent():
    uneven = tf.data.Dataset.from_tensor_slices(ROWS)
    batches = uneven.batch(4).concatenate(uneven.batch(3))  # 4, 4, 2, then 3, 3, 3, 1
    count = GraphCount(recent=2, timed=False)
    for _ in count.counting(batches):
        pass
    snapshot = count.snapshot()
    assert snapshot == (7, 20, (1, 3))  # batch i's size at i % 2: batches 6 and 5
    assert [examples_through(snapshot, n) for n in (7, 6, 5, 4)] == [20, 19, 16, None]
    # The next batch's size is written before the totals that count it: read in between,
    # the count is the one before it.
    count.state.scatter_nd_update([[2 + 7 % 3]], tf.constant([9], tf.int64))
    assert count.snapshot() == snapshot


@pytest.mark.parametrize("own_prefetch", [False, True])
def test_the_count_runs_ahead_on_the_prefetchs_thread_and_a_read_says_what_the_step_took(
    own_prefetch,
):
    # A function touching a variable costs the step's thread tens of microseconds a batch: it
    # runs under the pipeline's last prefetch (or the one tf.data would inject), whose thread
    # counts batches the step has not taken yet; a read takes them back.
    batches = tf.data.Dataset.from_tensor_slices(ROWS).batch(4)  # 4, 4 and a last batch of 2
    if own_prefetch:
        batches = batches.prefetch(2)
    count = GraphCount(recent=4)
    counted = count.counting(batches)
    stages = _stages(counted)
    # The timing (latency statistics, the aggregator, a closing prefetch(0)) over the prefetch,
    # whose thread runs the count; no prefetch of the monitor's own.
    assert [type(stage).__name__ for stage in stages][:3] == [
        "_Timed",
        "_PrefetchDataset",
        "_MapDataset",
    ]
    assert int(stages[1]._buffer_size) == (2 if own_prefetch else tf.data.AUTOTUNE)
    assert [type(stage).__name__ for stage in stages].count("_PrefetchDataset") == 1
    iterator = iter(counted)
    assert len(next(iterator)) == 4
    deadline = time.monotonic() + 60
    while count.state.numpy()[0] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert count.state.numpy()[0] >= 2  # the prefetch's thread counted the next batch
    assert count.snapshot() == (1, 4, (4, 0, 0, 0))
    assert [len(batch) for batch in iterator] == [4, 2]
    assert count.snapshot() == (3, 10, (4, 4, 2, 0))


def test_options_set_above_the_pipelines_prefetch_stay_with_the_counted_pipeline():
    # The count goes under the pipeline's own prefetch, which is rebuilt; options set after
    # it (here: no determinism, no autotuning) hold for the whole counted pipeline.
    options = tf.data.Options()
    options.deterministic = False
    options.autotune.enabled = False
    batches = tf.data.Dataset.from_tensor_slices(ROWS).batch(4).map(lambda rows: rows * 2)
    batches = batches.prefetch(2).with_options(options)
    count = GraphCount(recent=4)
    counted = count.counting(batches)
    assert counted.options().deterministic is False
    assert counted.options().autotune.enabled is False
    assert [type(stage).__name__ for stage in _stages(counted)][:3] == [
        "_Timed",
        "_PrefetchDataset",
        "_MapDataset",
    ]
    assert [len(batch) for batch in counted] == [4, 4, 2]
    assert count.snapshot()[:2] == (3, 10)


def test_without_a_prefetch_the_count_runs_as_the_step_takes_each_batch():
    options = tf.data.Options()
    options.autotune.enabled = False  # no prefetch injected
    batches = tf.data.Dataset.from_tensor_slices(ROWS).batch(4).with_options(options)
    count = GraphCount(recent=4)
    iterator = iter(count.counting(batches))
    next(iterator)
    assert count.snapshot() == (1, 4, (4, 0, 0, 0)) and count.state.numpy()[0] == 1
    assert [len(batch) for batch in iterator] == [4, 2]
    assert count.snapshot()[:2] == (3, 10)


def _stages(dataset):
    """The pipeline's stages from the last one down, options aside."""
    stages = [dataset]
    while stages[-1]._inputs():
        stages.append(stages[-1]._inputs()[0])
    return [stage for stage in stages if type(stage).__name__ != "_OptionsDataset"]


def test_batches_of_known_sizes_are_counted_by_the_timing_alone():
    # Arrays' batches (4, 4, 2 here) are known before the fit: the timing's own count of the
    # batches gives the examples, with no variable and no function per batch.
    from tensorflow.core.framework import summary_pb2
    from tensorflow.python.ops import gen_experimental_dataset_ops as stats_ops

    from tfthroughput.monitor.known_batches import KnownBatches

    count = GraphCount(recent=4, sizes=KnownBatches(batch_size=4, per_pass=3, last=2))
    counted = count.counting(tf.data.Dataset.from_tensor_slices(ROWS).batch(4))
    assert count.state is None
    for _ in range(2):  # two passes, each to its end
        assert [len(batch) for batch in counted] == [4, 4, 2]
    assert count.snapshot() == (6, 20, (4, 2, 2, 4))  # batch i at i % 4: batches 2 to 5
    summary = summary_pb2.Summary.FromString(
        stats_ops.stats_aggregator_summary(count._wait._aggregator).numpy()
    )
    assert [value.tag for value in summary.value if "Map" in value.tag] == []
    count.reset()
    next(iter(counted))
    assert count.snapshot() == (1, 4, (4, 0, 0, 0))
    assert GraphCount(recent=4, timed=False, sizes=KnownBatches(4, 3, 2)).state is not None


def test_ragged_batches_are_counted_by_their_rows():
    ragged = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1], [2, 3], [4, 5, 6]]))
    count = GraphCount(recent=4)
    assert [batch.shape[0] for batch in count.counting(ragged.batch(2))] == [2, 1]
    assert count.snapshot()[:2] == (2, 3)


def test_an_iterator_counted_before_keeps_its_pipeline_and_counts_from_zero():
    # Keras keeps a fit's validation iterator from epoch to epoch: counted again, it is not
    # rebuilt (nor its stage traced again), and its count starts over.
    from keras.src.backend.tensorflow.trainer import TFEpochIterator

    iterator = TFEpochIterator(
        x=ROWS, y=ROWS[:, :1], batch_size=4, distribute_strategy=tf.distribute.get_strategy()
    )
    count = GraphCount.attach(iterator, recent=8)
    counted = iterator._distributed_dataset
    assert [len(batch[0]) for batch in counted] == [4, 4, 2]
    assert count.snapshot()[:2] == (3, 10) and count.waited() >= 0

    again = GraphCount.attach(iterator, recent=8)
    assert again is count and iterator._distributed_dataset is counted
    assert count.snapshot()[:2] == (0, 0) and count.waited() == 0
    assert [len(batch[0]) for batch in counted] == [4, 4, 2]
    assert count.snapshot()[:2] == (3, 10)


@pytest.mark.parametrize("timed", [True, False])
def test_the_count_is_the_one_function_and_runs_inline(timed):
    # A plain map hands each call to the inter-op thread pool and waits for it, and a function
    # on the step's thread costs tens of microseconds a batch (benchmarks/input_wait_cost.py):
    # the wait is timed by tf.data's latency statistics, with no function of its own.
    def maps(dataset):
        found = [dataset] if type(dataset).__name__ == "_MapDataset" else []
        return found + [stage for source in dataset._inputs() for stage in maps(source)]

    counted = GraphCount(recent=8, timed=timed).counting(tf.data.Dataset.range(4).batch(2))
    stages = maps(counted)
    assert len(stages) == 1
    assert stages[0]._use_inter_op_parallelism is False


def test_two_counts_time_their_own_waits():
    # Each count has an aggregator of its own: one pipeline's wait never lands in another's.
    slow, quick = GraphCount(recent=4), GraphCount(recent=4)

    def sleepy(value):
        time.sleep(0.02)
        return value

    for _ in slow.counting(
        tf.data.Dataset.range(5).map(lambda v: tf.numpy_function(sleepy, [v], tf.int64)).batch(1)
    ):
        pass
    for _ in quick.counting(tf.data.Dataset.range(5).batch(1)):
        pass
    assert slow.waited() >= 0.8 * 5 * 0.02  # all but the consumer's own moments between batches
    assert quick.waited() < 0.02


def test_a_counted_pipeline_outlives_its_count():
    # The aggregator that times the wait is looked up when an iterator is made: the pipeline
    # keeps it, whether or not the count is still held.
    counted = GraphCount(recent=4).counting(tf.data.Dataset.range(3).batch(1))
    gc.collect()
    assert [int(batch[0]) for batch in counted] == [0, 1, 2]


def test_a_count_collected_while_a_function_is_traced_adds_nothing_to_its_graph():
    # Its aggregator is destroyed when the count goes, which may be in the middle of a trace.
    held = [GraphCount(recent=4)]

    @tf.function
    def traced():
        held.clear()
        gc.collect()
        return tf.constant(1)

    graph = traced.get_concrete_function().graph
    assert "DestroyResourceOp" not in {operation.type for operation in graph.get_operations()}


def test_the_timing_stages_are_traced_once_per_element_structure():
    # Made one by one, eagerly, the stages were most of each predict call's set-up: one
    # function makes them all, traced once for each element structure.
    from tfthroughput.monitor import pipeline_wait

    pipeline_wait._stages.cache_clear()
    rows = tf.data.Dataset.from_tensor_slices(ROWS)
    counts = [GraphCount(recent=4, sizes=KnownBatches.fixed(4)) for _ in range(3)]
    same = [count.counting(rows.batch(4, drop_remainder=True)) for count in counts[:2]]
    other = counts[2].counting(rows.map(lambda row: (row, row)).batch(4, drop_remainder=True))
    assert pipeline_wait._stages.cache_info().misses == 2
    assert pipeline_wait._stages.cache_info().hits == 1
    for count, dataset in zip(counts, [*same, other], strict=True):
        assert [len(tf.nest.flatten(batch)[0]) for batch in dataset] == [4, 4]
        assert count.snapshot()[:2] == (2, 8)  # the timing's own count of batches taken
