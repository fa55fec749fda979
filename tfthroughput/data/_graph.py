"""A ``tf.data.Dataset`` as the graph TensorFlow serialises it, and what tf.data does to it.

TensorFlow can serialise any dataset to a ``GraphDef`` (the op ``DatasetToGraphV2``): one node
per transformation, its scalar arguments as ``Const`` inputs, its functions in the graph's
function library. This module reads that graph into :class:`Stage` objects, source first
(what tf.data changes at run time is in :mod:`tfthroughput.data._rewrites`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import tensorflow as tf
from tensorflow.core.framework import dataset_metadata_pb2, function_pb2, graph_pb2, node_def_pb2
from tensorflow.python.framework import op_def_registry

from tfthroughput.data._ops import (
    ARGUMENT_POSITIONS,
    DATASET_SUFFIXES,
    FILE_READER_OPS,
    LOOP_OPS,
    SHUFFLE_OPS,
    TRANSFORMATIONS,
    TRANSPARENT,
    is_random,
)


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
        while node.op in TRANSPARENT:
            node = self._nodes[_name(node.input[0])]
        return node

    def _dataset_inputs(self, node: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
        inputs = [self._nodes[_name(i)] for i in node.input if not i.startswith("^")]
        return [self._skip_transparent(n) for n in inputs if n.op.endswith(DATASET_SUFFIXES)]

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
        text = TRANSFORMATIONS.get(node.op, node.op)
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
        position = ARGUMENT_POSITIONS.get(stage.op, {}).get(name)
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
        return [op for op in self.function_ops(self.function_of(stage.node)) if is_random(op)]

    def is_random(self, stage: Stage) -> bool:
        """Whether a stage's output differs from one pass to the next: a shuffle that
        reshuffles each pass (the default; ``reshuffle_each_iteration=False`` repeats one
        order), or a function with random ops (a cache after it would freeze one draw)."""
        if stage.op in SHUFFLE_OPS:
            attributes = stage.node.attr
            return (
                "reshuffle_each_iteration" not in attributes
                or attributes["reshuffle_each_iteration"].b
            )
        return bool(self.random_ops(stage))

    def unseeded_random_ops(self, stage: Stage) -> list[str]:
        function = self.function_of(stage.node)
        found = []
        for node in function.node_def if function is not None else ():
            if is_random(node.op):
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
        return bool(LOOP_OPS & set(self.function_ops(self.function_of(stage.node))))

    def cycle_length(self, stage: Stage) -> int | None:
        """The interleave's cycle length, as the dataset fixed it when it was made.

        The serialised graph holds the value the kernel resolved: ``cycle_length=AUTOTUNE``
        is already replaced there (see :func:`autotune_cycle_length`).
        """
        return self.argument(stage, "cycle_length")


def _name(input_name: str) -> str:
    return input_name.lstrip("^").split(":")[0]
