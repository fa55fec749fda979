"""What tf.data does to a pipeline when an iterator is made (TensorFlow 2.21).

Checked against the profiler's trace of the pipeline that actually runs:

* ``map_parallelization`` (default on): a top-level ``map`` whose function has no stateful op
  runs as ``map(num_parallel_calls=AUTOTUNE, deterministic=True)``; only with autotuning on,
  never inside a function (an ``interleave``'s inner pipeline), never with ``synchronous=True``.
* ``inject_prefetch`` (default on): a ``prefetch(AUTOTUNE)`` is appended when the last stage is
  synchronous; only with autotuning on.
* ``map_and_batch_fusion`` (default on): a ``map`` directly followed by ``batch`` runs as one
  asynchronous ``MapAndBatch`` stage.
* ``cycle_length=AUTOTUNE`` of an interleave is fixed when the dataset is made.
"""

from __future__ import annotations

import math
import os

from tfthroughput.data._graph import DatasetGraph, Stage
from tfthroughput.data._ops import ASYNC_OPS, AUTOTUNE, MAP_OPS


def optimization_on(graph: DatasetGraph, name: str) -> bool:
    """Whether a tf.data graph rewrite is on for this dataset's options."""
    value = getattr(graph.options.experimental_optimization, name)
    if value is not None:
        return bool(value)
    return graph.options.experimental_optimization.apply_default_optimizations is not False


def autotune_on(graph: DatasetGraph) -> bool:
    """Whether tf.data's autotuning is on (its default)."""
    return graph.options.autotune.enabled is not False


def map_parallelization_reason(graph: DatasetGraph, stage: Stage) -> str:
    """``""`` when tf.data runs this sequential ``map`` in parallel, else why it does not."""
    if stage.op != "MapDataset":
        return "it is not a plain map"
    if not autotune_on(graph):
        return (
            "autotuning is off (options.autotune.enabled=False), and tf.data "
            "parallelises maps only with it"
        )
    if not optimization_on(graph, "map_parallelization"):
        return "options.experimental_optimization.map_parallelization is off"
    if graph.attr_bool(stage, "force_synchronous"):
        return "it was made with synchronous=True"
    stateful = graph.stateful_ops(graph.function_of(stage.node))
    if stateful:
        ops = ", ".join(sorted(set(stateful)))
        return f"its function has stateful ops ({ops}), which tf.data never parallelises by itself"
    return ""


def runs_in_parallel(graph: DatasetGraph, stage: Stage) -> bool:
    """Whether a ``map`` stage runs with more than one call at a time once iterated."""
    if stage.op == "MapDataset":
        return not map_parallelization_reason(graph, stage)
    calls = graph.argument(stage, "num_parallel_calls")
    return calls is None or calls == AUTOTUNE or calls > 1


def runs_async(graph: DatasetGraph, stage: Stage) -> bool:
    """Whether the stage hands out elements from a buffer filled by background threads."""
    if stage.op in ASYNC_OPS:
        return True
    if stage.op == "MapDataset":
        return runs_in_parallel(graph, stage)
    if stage.op in ("BatchDataset", "BatchDatasetV2") and optimization_on(
        graph, "map_and_batch_fusion"
    ):
        return bool(stage.inputs) and stage.inputs[0].op in MAP_OPS
    return False


def prefetch_injected(graph: DatasetGraph) -> bool:
    """Whether tf.data appends ``prefetch(AUTOTUNE)`` itself when the pipeline is iterated."""
    return (
        autotune_on(graph)
        and optimization_on(graph, "inject_prefetch")
        and graph.last.op != "PrefetchDataset"
        and not runs_async(graph, graph.last)
    )


def autotune_cycle_length(parallel: bool, num_parallel_calls: int | None = AUTOTUNE) -> int:
    """The cycle length ``cycle_length=AUTOTUNE`` is fixed to when the dataset is made.

    TensorFlow 2.21's interleave kernels: a parallel interleave with
    ``num_parallel_calls=AUTOTUNE`` takes ``ceil(cores / 3)`` (one thread for the current
    element of each cycle slot and two prefetching future ones, roughly one thread per core);
    with a fixed ``num_parallel_calls``, ``min(num_parallel_calls, cores)``; a sequential
    interleave takes the number of cores.
    """
    cores = schedulable_cores()
    if not parallel:
        return cores
    if num_parallel_calls is not None and num_parallel_calls != AUTOTUNE:
        return min(num_parallel_calls, cores)
    return math.ceil(cores / 3)


def schedulable_cores() -> int:
    """CPU cores this process may run on (what TensorFlow's ``port::MaxParallelism`` counts)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
