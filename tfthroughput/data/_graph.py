"""A ``tf.data.Dataset`` as the graph TensorFlow serialises it, and what tf.data does to it.

TensorFlow can serialise any dataset to a ``GraphDef`` (the op ``DatasetToGraphV2``): one node
per transformation, its scalar arguments as ``Const`` inputs, its functions in the graph's
function library. This module reads that graph into :class:`Stage` objects, source first, and
predicts the graph rewrites tf.data applies when an iterator is made (TensorFlow 2.21, checked
against the profiler's trace of the pipeline that actually runs):

* ``map_parallelization`` (default on): a top-level ``map`` whose function has no stateful op
  runs as ``map(num_parallel_calls=AUTOTUNE, deterministic=True)``; only with autotuning on,
  never inside a function (an ``interleave``'s inner pipeline), never with ``synchronous=True``.
* ``inject_prefetch`` (default on): a ``prefetch(AUTOTUNE)`` is appended when the last stage is
  synchronous; only with autotuning on.
* ``map_and_batch_fusion`` (default on): a ``map`` directly followed by ``batch`` runs as one
  asynchronous ``MapAndBatch`` stage.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import tensorflow as tf
from tensorflow.core.framework import dataset_metadata_pb2, function_pb2, graph_pb2, node_def_pb2
from tensorflow.python.framework import op_def_registry

AUTOTUNE = -1

# Added by tf.data (options, autotuning, thread pools); they are not stages a user wrote.
_TRANSPARENT = frozenset(
    {
        "OptionsDataset",
        "ModelDataset",
        "OptimizeDataset",
        "OptimizeDatasetV2",
        "FinalizeDataset",
        "MaxIntraOpParallelismDataset",
        "PrivateThreadPoolDataset",
        "AssertNextDataset",
        "ExperimentalAssertNextDataset",
    }
)
ASYNC_OPS = frozenset(
    {
        "PrefetchDataset",
        "ParallelMapDataset",
        "ParallelMapDatasetV2",
        "ParallelInterleaveDatasetV2",
        "ParallelInterleaveDatasetV3",
        "ParallelInterleaveDatasetV4",
        "ParallelBatchDataset",
        "MapAndBatchDataset",
        "ExperimentalMapAndBatchDataset",
    }
)
MAP_OPS = frozenset({"MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2"})
BATCH_OPS = frozenset(
    {
        "BatchDataset",
        "BatchDatasetV2",
        "ParallelBatchDataset",
        "PaddedBatchDataset",
        "PaddedBatchDatasetV2",
        "MapAndBatchDataset",
        "ExperimentalMapAndBatchDataset",
    }
)
SHUFFLE_OPS = frozenset(
    {"ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3", "ShuffleAndRepeatDatasetV2"}
)
INTERLEAVE_OPS = frozenset(
    {
        "InterleaveDataset",
        "ParallelInterleaveDatasetV2",
        "ParallelInterleaveDatasetV3",
        "ParallelInterleaveDatasetV4",
    }
)
FILE_READER_OPS = frozenset(
    {
        "TFRecordDataset",
        "TFRecordDatasetV2",
        "TextLineDataset",
        "FixedLengthRecordDataset",
        "FixedLengthRecordDatasetV2",
        "CSVDataset",
        "CSVDatasetV2",
        "ExperimentalCSVDataset",
    }
)
_TRANSFORMATIONS = {
    "RangeDataset": "range",
    "TensorDataset": "from_tensors",
    "TensorSliceDataset": "from_tensor_slices",
    "GeneratorDataset": "from_generator",
    "RandomDataset": "Dataset.random",
    "RandomDatasetV2": "Dataset.random",
    "FilterDataset": "filter",
    "ParallelFilterDataset": "filter",
    "FlatMapDataset": "flat_map",
    "UnbatchDataset": "unbatch",
    "PaddedBatchDataset": "padded_batch",
    "PaddedBatchDatasetV2": "padded_batch",
    "MapAndBatchDataset": "map_and_batch",
    "ExperimentalMapAndBatchDataset": "map_and_batch",
    "CacheDataset": "cache",
    "CacheDatasetV2": "cache",
    "RepeatDataset": "repeat",
    "PrefetchDataset": "prefetch",
    "TakeDataset": "take",
    "SkipDataset": "skip",
    "ZipDataset": "zip",
    "ConcatenateDataset": "concatenate",
    "ShuffleAndRepeatDatasetV2": "shuffle+repeat",
    **{op: "map" for op in MAP_OPS},
    **{op: "batch" for op in ("BatchDataset", "BatchDatasetV2", "ParallelBatchDataset")},
    **{op: "shuffle" for op in ("ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3")},
    **{op: "interleave" for op in INTERLEAVE_OPS},
    **{op: "TFRecordDataset" for op in ("TFRecordDataset", "TFRecordDatasetV2")},
}
# Ops whose result differs from call to call (seeded or not). Stateless random ops are left out:
# given their seed input they always return the same values.
_RANDOM_OP = re.compile(r"^(?!Stateless)(Random|Stateful(?!PartitionedCall)|Rng)")
_RANDOM_NAMES = frozenset({"Multinomial", "ParameterizedTruncatedNormal", "TruncatedNormal"})
_LOOP_OPS = frozenset({"While", "StatelessWhile"})


@dataclass
class Stage:
    """One transformation of the pipeline as written (before tf.data's rewrites).

    ``position`` counts from 1 at the source. ``inputs`` are the stages it reads from.
    """

    position: int
    node: node_def_pb2.NodeDef
    inputs: list[Stage] = field(default_factory=list)
    transformation: str = ""

    @property
    def op(self) -> str:
        return self.node.op

    def __str__(self) -> str:
        return f"stage {self.position}: {self.transformation} ({self.op})"


class DatasetGraph:
    """The stages of a dataset's graph, its constants, and its function library."""

    def __init__(self, dataset: tf.data.Dataset) -> None:
        serialized = dataset._as_serialized_graph(
            external_state_policy=tf.data.experimental.ExternalStatePolicy.IGNORE
        )
        self.graph = graph_pb2.GraphDef.FromString(serialized.numpy())
        self.options = dataset.options()
        self._nodes = {node.name: node for node in self.graph.node}
        self._functions = {f.signature.name: f for f in self.graph.library.function}
        retval = next(node for node in self.graph.node if node.op == "_Retval")
        self.stages: list[Stage] = []
        self._by_name: dict[str, Stage] = {}
        self.last = self._walk(self._skip_transparent(self._nodes[_name(retval.input[0])]))

    # ------------------------------------------------------------------------- structure

    def _skip_transparent(self, node: node_def_pb2.NodeDef) -> node_def_pb2.NodeDef:
        while node.op in _TRANSPARENT:
            node = self._nodes[_name(node.input[0])]
        return node

    def _dataset_inputs(self, node: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
        inputs = [self._nodes[_name(i)] for i in node.input if not i.startswith("^")]
        return [self._skip_transparent(n) for n in inputs if n.op.endswith(_DATASET_SUFFIXES)]

    def _walk(self, node: node_def_pb2.NodeDef) -> Stage:
        if node.name in self._by_name:
            return self._by_name[node.name]
        # from_generator is a flat_map over one dummy element: the generator is the source.
        sources = [] if self.is_generator(node) else self._dataset_inputs(node)
        inputs = [self._walk(n) for n in sources]
        stage = Stage(len(self.stages) + 1, node, inputs, self._transformation(node))
        self.stages.append(stage)
        self._by_name[node.name] = stage
        return stage

    def _transformation(self, node: node_def_pb2.NodeDef) -> str:
        if self.is_generator(node):
            return "from_generator"
        text = _TRANSFORMATIONS.get(node.op, node.op)
        function = self.function_label(node)
        return f"{text}({function})" if function else text

    def positions_by_name(self) -> dict[str, int]:
        """Stage positions by the dataset names the profiler's trace uses (``"MapDataset:3"``)."""
        names = {}
        for stage in self.stages:
            attr = stage.node.attr.get("metadata")
            if attr is not None and attr.s:
                names[dataset_metadata_pb2.Metadata.FromString(attr.s).name.decode()] = (
                    stage.position
                )
        return names

    def upstream(self, stage: Stage) -> list[Stage]:
        """Every stage ``stage`` reads from, directly or not, nearest first."""
        seen: dict[int, Stage] = {}
        frontier = list(stage.inputs)
        while frontier:
            current = frontier.pop(0)
            if current.position not in seen:
                seen[current.position] = current
                frontier.extend(current.inputs)
        return list(seen.values())

    def downstream(self, stage: Stage) -> list[Stage]:
        """Every stage that reads ``stage``'s output, directly or not, nearest first."""
        return sorted(
            (s for s in self.stages if stage in self.upstream(s)), key=lambda s: s.position
        )

    # -------------------------------------------------------------------------- arguments

    def inputs(self, stage: Stage) -> list[str]:
        return [i for i in stage.node.input if not i.startswith("^")]

    def const(self, input_name: str) -> int | None:
        """The scalar integer (or bool) value of a ``Const`` input, else ``None``."""
        node = self._nodes.get(_name(input_name))
        if node is None or node.op != "Const":
            return None
        tensor = node.attr["value"].tensor
        if tensor.tensor_shape.dim:
            return None
        for values in (tensor.int64_val, tensor.int_val, tensor.bool_val):
            if values:
                return int(values[0])
        try:
            return int(tf.make_ndarray(tensor))
        except (TypeError, ValueError):
            return None

    def const_length(self, input_name: str) -> int | None:
        """Length of a 1-D ``Const`` input (e.g. a list of file names), else ``None``."""
        node = self._nodes.get(_name(input_name))
        if node is None or node.op != "Const":
            return None
        dims = node.attr["value"].tensor.tensor_shape.dim
        return int(dims[0].size) if len(dims) == 1 else None

    def argument(self, stage: Stage, name: str) -> int | None:
        """A scalar argument of a stage by its ``tf.data`` name, from the op's input layout."""
        inputs = self.inputs(stage)
        position = _ARGUMENT_POSITIONS.get(stage.op, {}).get(name)
        if position is None or not -len(inputs) <= position < len(inputs):
            return None
        return self.const(inputs[position])

    def attr_string(self, stage: Stage, name: str) -> str:
        attr = stage.node.attr.get(name)
        return attr.s.decode() if attr is not None and attr.HasField("s") else ""

    def attr_bool(self, stage: Stage, name: str) -> bool:
        attr = stage.node.attr.get(name)
        return bool(attr is not None and attr.b)

    # -------------------------------------------------------------------------- functions

    def function_of(self, node: node_def_pb2.NodeDef) -> function_pb2.FunctionDef | None:
        for key in ("f", "predicate"):
            attr = node.attr.get(key)
            if attr is not None and attr.HasField("func"):
                return self._functions.get(attr.func.name)
        return None

    def function_label(self, node: node_def_pb2.NodeDef) -> str:
        """The user's function name: ``"decode"`` from ``__inference_Dataset_map_decode_12``."""
        function = self.function_of(node)
        if function is None:
            return ""
        name = re.sub(r"^__inference_", "", function.signature.name)
        name = re.sub(r"_\d+$", "", name)
        name = re.sub(r"^Dataset_[a-z_]+?_(?=[A-Za-z<])", "", name, count=1)
        if name.startswith("classabc.ABCMeta"):
            return ""
        return name

    def function_ops(self, function: function_pb2.FunctionDef | None) -> list[str]:
        """Op types in a function and in the functions it calls, depth first."""
        ops: list[str] = []
        seen: set[str] = set()

        def visit(fn: function_pb2.FunctionDef) -> None:
            if fn.signature.name in seen:
                return
            seen.add(fn.signature.name)
            for node in fn.node_def:
                ops.append(node.op)
                for attr in node.attr.values():
                    if attr.HasField("func") and attr.func.name in self._functions:
                        visit(self._functions[attr.func.name])
                if node.op in self._functions:
                    visit(self._functions[node.op])

        if function is not None:
            visit(function)
        return ops

    def stateful_ops(self, function: function_pb2.FunctionDef | None) -> list[str]:
        """The ops that make tf.data treat ``function`` as stateful (``Assert`` excepted)."""
        if function is None or not function.signature.is_stateful:
            return []
        found: list[str] = []
        for node in function.node_def:
            if self._node_is_stateful(node):
                found.append(node.op)
        return found

    def _node_is_stateful(self, node: node_def_pb2.NodeDef) -> bool:
        # The rule of tf.data's function_utils::IsNodeStateful: unknown ops (function calls)
        # count as stateful; If and While only when a branch or body is.
        op_def = op_def_registry.get(node.op)
        if op_def is None:
            return True
        if not op_def.is_stateful or node.op == "Assert":
            return False
        branches = {"If": ("then_branch", "else_branch"), "While": ("cond", "body")}.get(node.op)
        if branches:
            functions = [self._functions.get(node.attr[key].func.name) for key in branches]
            return any(fn is None or self.stateful_ops(fn) for fn in functions)
        return True

    def random_ops(self, stage: Stage) -> list[str]:
        """Random ops a stage's function runs (not counting seeded stateless ones)."""
        return [op for op in self.function_ops(self.function_of(stage.node)) if _is_random(op)]

    def unseeded_random_ops(self, stage: Stage) -> list[str]:
        function = self.function_of(stage.node)
        found = []
        for node in function.node_def if function is not None else ():
            if _is_random(node.op):
                seed = node.attr["seed"].i if "seed" in node.attr else 0
                seed2 = node.attr["seed2"].i if "seed2" in node.attr else 0
                if seed == 0 and seed2 == 0:
                    found.append(node.op)
        return found

    def is_generator(self, node: node_def_pb2.NodeDef) -> bool:
        return node.op == "FlatMapDataset" and "GeneratorDataset" in self.function_ops(
            self.function_of(node)
        )

    def reads_files(self, stage: Stage) -> bool:
        """Whether the stage's function opens files (a TFRecordDataset, ...), or its input
        is a list of file names."""
        if FILE_READER_OPS & set(self.function_ops(self.function_of(stage.node))):
            return True
        return any(
            s.op == "TensorSliceDataset" and self.attr_bool(s, "is_files")
            for s in self.upstream(stage)
        )

    def file_count(self, stage: Stage) -> int | None:
        """Number of file names feeding the stage, when they are a constant list."""
        for source in self.upstream(stage):
            if source.op == "TensorSliceDataset" and self.attr_bool(source, "is_files"):
                inputs = self.inputs(source)
                return self.const_length(inputs[0]) if inputs else None
        return None

    def has_loop(self, stage: Stage) -> bool:
        return bool(_LOOP_OPS & set(self.function_ops(self.function_of(stage.node))))

    # ----------------------------------------------------------- what tf.data does at run

    def _optimization_on(self, name: str) -> bool:
        value = getattr(self.options.experimental_optimization, name)
        if value is not None:
            return bool(value)
        return self.options.experimental_optimization.apply_default_optimizations is not False

    @property
    def autotune(self) -> bool:
        return self.options.autotune.enabled is not False

    def map_parallelization_reason(self, stage: Stage) -> str:
        """``""`` when tf.data runs this sequential ``map`` in parallel, else why it does not."""
        if stage.op != "MapDataset":
            return "it is not a plain map"
        if not self.autotune:
            return (
                "autotuning is off (options.autotune.enabled=False), and tf.data "
                "parallelises maps only with it"
            )
        if not self._optimization_on("map_parallelization"):
            return "options.experimental_optimization.map_parallelization is off"
        if self.attr_bool(stage, "force_synchronous"):
            return "it was made with synchronous=True"
        stateful = self.stateful_ops(self.function_of(stage.node))
        if stateful:
            ops = ", ".join(sorted(set(stateful)))
            return (
                f"its function has stateful ops ({ops}), which tf.data never parallelises by itself"
            )
        return ""

    def runs_in_parallel(self, stage: Stage) -> bool:
        """Whether a ``map`` stage runs with more than one call at a time once iterated."""
        if stage.op == "MapDataset":
            return not self.map_parallelization_reason(stage)
        calls = self.argument(stage, "num_parallel_calls")
        return calls is None or calls == AUTOTUNE or calls > 1

    def runs_async(self, stage: Stage) -> bool:
        """Whether the stage hands out elements from a buffer filled by background threads."""
        if stage.op in ASYNC_OPS:
            return True
        if stage.op == "MapDataset":
            return self.runs_in_parallel(stage)
        if stage.op in ("BatchDataset", "BatchDatasetV2") and self._optimization_on(
            "map_and_batch_fusion"
        ):
            return bool(stage.inputs) and stage.inputs[0].op in MAP_OPS
        return False

    def prefetch_injected(self) -> bool:
        """Whether tf.data appends ``prefetch(AUTOTUNE)`` itself when the pipeline is iterated."""
        return (
            self.autotune
            and self._optimization_on("inject_prefetch")
            and self.last.op != "PrefetchDataset"
            and not self.runs_async(self.last)
        )

    def cycle_length(self, stage: Stage) -> int | None:
        """The interleave's cycle length, as the dataset fixed it when it was made.

        The serialised graph holds the value the kernel resolved: ``cycle_length=AUTOTUNE``
        is already replaced there (see :func:`autotune_cycle_length`).
        """
        return self.argument(stage, "cycle_length")


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


def _is_random(op: str) -> bool:
    return bool(_RANDOM_OP.search(op)) or op in _RANDOM_NAMES


def _name(input_name: str) -> str:
    return input_name.lstrip("^").split(":")[0]


_DATASET_SUFFIXES = ("Dataset", "DatasetV2", "DatasetV3", "DatasetV4")

# Where each scalar argument sits among an op's inputs (negative: counted from the end, past
# the function's captured inputs).
_ARGUMENT_POSITIONS: dict[str, dict[str, int]] = {
    "ParallelMapDataset": {"num_parallel_calls": -1},
    "ParallelMapDatasetV2": {"num_parallel_calls": -1},
    "InterleaveDataset": {"cycle_length": -2, "block_length": -1},
    "ParallelInterleaveDatasetV2": {"cycle_length": -3, "num_parallel_calls": -1},
    "ParallelInterleaveDatasetV3": {"cycle_length": -3, "num_parallel_calls": -1},
    "ParallelInterleaveDatasetV4": {"cycle_length": -5, "num_parallel_calls": -1},
    "BatchDataset": {"batch_size": 1},
    "BatchDatasetV2": {"batch_size": 1},
    "ParallelBatchDataset": {"batch_size": 1, "num_parallel_calls": 2},
    "PaddedBatchDataset": {"batch_size": 1},
    "PaddedBatchDatasetV2": {"batch_size": 1},
    "MapAndBatchDataset": {"batch_size": -3, "num_parallel_calls": -2},
    "ExperimentalMapAndBatchDataset": {"batch_size": -3, "num_parallel_calls": -2},
    "ShuffleDataset": {"buffer_size": 1, "seed": 2, "seed2": 3},
    "ShuffleDatasetV2": {"buffer_size": 1},
    "ShuffleDatasetV3": {"buffer_size": 1, "seed": 2, "seed2": 3},
    "ShuffleAndRepeatDatasetV2": {"buffer_size": 1, "seed": 2, "seed2": 3},
    "PrefetchDataset": {"buffer_size": 1},
}
