"""A readable account of what :func:`tfthroughput.build_pipeline` built, and why."""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import tensorflow as tf

from tfthroughput._validation import check_dataset, check_positive_int

if TYPE_CHECKING:
    from tfthroughput.data.autotune import PipelineMeasurement

AUTOTUNE_TEXT = "AUTOTUNE"


@dataclass(frozen=True)
class PipelineStage:
    """One transformation of a built pipeline.

    Attributes:
        transformation: The ``tf.data.Dataset`` method, e.g. ``"map"`` or ``"prefetch"``.
        function: Name of the user function it applies (``"preprocess_fn"``, ...), or ``""``.
        arguments: ``(name, value)`` pairs passed to the method, values as text;
            ``"AUTOTUNE"`` means tf.data picks the value at run time.
        reason: Why the stage is there and why it sits where it does.
    """

    transformation: str
    function: str = ""
    arguments: tuple[tuple[str, str], ...] = ()
    reason: str = ""

    def __str__(self) -> str:
        parts = ([self.function] if self.function else []) + [f"{k}={v}" for k, v in self.arguments]
        return f"{self.transformation}({', '.join(parts)})"


@dataclass(frozen=True)
class PipelineDescription:
    """Stages and options of a dataset returned by :func:`tfthroughput.build_pipeline`.

    Attributes:
        source: What the pipeline reads, e.g. ``"3 files (TFRecord)"``.
        stages: The transformations in the order they run, first to last.
        options: The ``tf.data.Options`` of the returned dataset that the builder sets, read
            back from ``dataset.options()``: ``deterministic``, ``autotune.enabled``,
            ``experimental_optimization.map_fusion`` (consecutive maps run as one function),
            ``autotune.ram_budget`` (bytes, ``None`` = tf.data's default of half the RAM),
            ``threading.private_threadpool_size`` (``None`` = TensorFlow's shared pool).
        element_spec: The returned dataset's ``element_spec``, as text.
        measurement: With ``describe_pipeline(dataset, measure=N)``: what AUTOTUNE chose and
            each stage's share of the time over ``N`` batches (a
            :class:`~tfthroughput.data.autotune.PipelineMeasurement`); else ``None``.
        bytes_per_batch: Bytes of one full batch as the pipeline yields it, i.e. what crosses
            from the host to the device; ``None`` where not fixed (strings, ragged tensors).
        device_functions: With ``augment_on="device"``: the functions left to the training
            step (``"augment_fn"``, ``"batch_fn"``), applied by
            :class:`~tfthroughput.data.DeviceAugmented`; else ``()``.
        model_bytes_per_batch: With ``augment_on="device"``: bytes of one batch after the
            device work, as the model receives it (e.g. ``float32`` where ``uint8`` shipped);
            else ``None``.
    """

    source: str
    stages: tuple[PipelineStage, ...]
    options: dict[str, object] = field(default_factory=dict)
    element_spec: str = ""
    measurement: PipelineMeasurement | None = None
    bytes_per_batch: int | None = None
    device_functions: tuple[str, ...] = ()
    model_bytes_per_batch: int | None = None

    @property
    def transformations(self) -> tuple[str, ...]:
        """Just the method names, in order, e.g. ``("interleave", "map", ..., "prefetch")``."""
        return tuple(stage.transformation for stage in self.stages)

    def __str__(self) -> str:
        lines = [f"source: {self.source}"]
        for number, stage in enumerate(self.stages, start=1):
            lines.append(f"{number:>2}. {stage}")
            if stage.reason:
                lines.append(f"      {stage.reason}")
        lines.append("options: " + ", ".join(f"{k}={v}" for k, v in self.options.items()))
        lines.append(f"yields: {self.element_spec}")
        lines.extend(_transfer_lines(self))
        if any(AUTOTUNE_TEXT in str(stage) for stage in self.stages):
            lines.append(
                "Retuned while the pipeline runs: num_parallel_calls=AUTOTUNE (the parallelism "
                "of maps, the batch and an interleave) and prefetch buffer sizes."
            )
            if any(stage.transformation == "interleave" for stage in self.stages):
                lines.append(
                    "Fixed when the dataset was made: an interleave's cycle length (files read "
                    "at once); cycle_length=AUTOTUNE becomes ceil(cores / 3)."
                )
        if self.measurement is not None:
            lines.append("What AUTOTUNE chose:")
            lines.append(str(self.measurement))
        elif any(AUTOTUNE_TEXT in str(stage) for stage in self.stages):
            lines.append("describe_pipeline(dataset, measure=N) reports what AUTOTUNE chose.")
        return "\n".join(lines)


def _transfer_lines(description: PipelineDescription) -> list[str]:
    """The host-to-device bytes per batch, and the work left to the training step."""
    from tfthroughput.data.batch_bytes import bytes_text

    shipped, model = description.bytes_per_batch, description.model_bytes_per_batch
    lines = []
    if description.device_functions:
        lines.append(
            "in the training step (augment_on='device', applied by DeviceAugmented): "
            + ", then ".join(description.device_functions)
            + (
                "; batch_fn in evaluate and predict too"
                if "batch_fn" in description.device_functions
                else ""
            )
        )
    if shipped is not None:
        text = f"bytes per batch, host to device: {bytes_text(shipped)}"
        if model is not None and model != shipped:
            text += (
                f"; after the device work (what the model receives): {bytes_text(model)} "
                f"({model / shipped:.1f}x the bytes shipped)"
            )
        lines.append(text)
    return lines


# Descriptions of the datasets build_pipeline returned. Weak keys: the record goes when the
# dataset does, so describing never keeps a pipeline (or its cache) alive.
_DESCRIPTIONS: weakref.WeakKeyDictionary[tf.data.Dataset, PipelineDescription] = (
    weakref.WeakKeyDictionary()
)


def _record(dataset: tf.data.Dataset, description: PipelineDescription) -> None:
    _DESCRIPTIONS[dataset] = description


def _options_of(dataset: tf.data.Dataset) -> dict[str, object]:
    options = dataset.options()
    return {
        "deterministic": options.deterministic,
        "autotune.enabled": options.autotune.enabled,
        "experimental_optimization.map_fusion": options.experimental_optimization.map_fusion,
        "autotune.ram_budget": options.autotune.ram_budget,
        "threading.private_threadpool_size": options.threading.private_threadpool_size,
    }


def describe_pipeline(
    dataset: tf.data.Dataset, *, measure: int | None = None
) -> PipelineDescription:
    """Describe the stages and options of a dataset built by :func:`build_pipeline`.

    Each stage says what is fixed when the dataset is made and what tf.data retunes while it
    runs. ``cycle_length=AUTOTUNE`` (an interleave over files with the default
    ``parallel_reads``) is fixed at build time to ``ceil(cores / 3)`` (1 on a 2-core machine,
    where files are then read one at a time, and with ``deterministic=True`` the record order
    depends on the core count); ``num_parallel_calls=AUTOTUNE`` and prefetch buffers are
    retuned as the pipeline runs. ``measure=N`` runs ``N`` batches under the profiler and
    adds what AUTOTUNE chose (see :func:`tfthroughput.data.measure_pipeline`).

    Args:
        dataset: A dataset exactly as :func:`tfthroughput.build_pipeline` returned it. Any
            further transformation (``.take()``, ``.map()``, ...) makes a new dataset that the
            builder did not build.
        measure: Batches to run for :attr:`PipelineDescription.measurement`. Defaults to
            ``None``: not run.

    Returns:
        A frozen :class:`PipelineDescription`; ``print()`` it for a numbered list of stages.
        Its options are read from ``dataset.options()``, so they are the dataset's own.

    Raises:
        TypeError: If ``dataset`` is not a ``tf.data.Dataset`` or ``measure`` not an int.
        ValueError: If ``dataset`` was not returned by ``build_pipeline``, or ``measure`` is
            not positive.
        RuntimeError: With ``measure``, if another profiler session is running.

    Example:
        >>> import tensorflow as tf
        >>> from tfthroughput import build_pipeline
        >>> ds = build_pipeline(tf.data.Dataset.range(8), batch_size=4)
        >>> describe_pipeline(ds).transformations
        ('batch', 'prefetch')
    """
    check_dataset("dataset", dataset)
    recorded = _DESCRIPTIONS.get(dataset)
    if recorded is None:
        raise ValueError(
            "`dataset` was not returned by build_pipeline (a transformation applied afterwards "
            "makes a new dataset); describe the dataset build_pipeline returned. "
            f"Received: dataset={dataset!r}"
        )
    check_positive_int("measure", measure, allow_none=True)
    measurement = None
    if measure is not None:
        from tfthroughput.data.autotune import measure_pipeline

        measurement = _numbered_as_described(
            measure_pipeline(dataset, measure), dataset, len(recorded.stages)
        )
    return PipelineDescription(
        source=recorded.source,
        stages=_with_build_time_values(dataset, recorded.stages),
        options=_options_of(dataset),
        element_spec=str(dataset.element_spec),
        measurement=measurement,
        bytes_per_batch=recorded.bytes_per_batch,
        device_functions=recorded.device_functions,
        model_bytes_per_batch=recorded.model_bytes_per_batch,
    )


def _numbered_as_described(
    measurement: PipelineMeasurement, dataset: tf.data.Dataset, described: int
) -> PipelineMeasurement:
    """Renumber the measured stages as the description numbers them (the builder's stages are
    the last ``described`` of the graph; what comes before is the source, numbered 0)."""
    from tfthroughput.data._graph import DatasetGraph

    offset = len(DatasetGraph(dataset).stages) - described
    stages = tuple(
        dataclasses.replace(
            stage, positions=tuple(sorted({max(p - offset, 0) for p in stage.positions}))
        )
        for stage in measurement.stages
    )
    return dataclasses.replace(measurement, stages=stages)


def _with_build_time_values(
    dataset: tf.data.Dataset, stages: tuple[PipelineStage, ...]
) -> tuple[PipelineStage, ...]:
    """Interleave stages with the cycle length the dataset fixed, read from its graph."""
    if not any(_autotuned_cycle(stage) for stage in stages):
        return stages
    from tfthroughput.data._graph import DatasetGraph
    from tfthroughput.data._ops import INTERLEAVE_OPS
    from tfthroughput.data._rewrites import schedulable_cores

    graph = DatasetGraph(dataset)
    cycles = iter([graph.cycle_length(s) for s in graph.stages if s.op in INTERLEAVE_OPS])
    described = []
    for stage in stages:
        if stage.transformation == "interleave":
            cycle = next(cycles, None)
            if _autotuned_cycle(stage) and cycle is not None:
                files = "one file at a time" if cycle == 1 else f"{cycle} files at once"
                stage = dataclasses.replace(
                    stage,
                    arguments=tuple(
                        (k, f"{AUTOTUNE_TEXT} (fixed at {cycle})" if k == "cycle_length" else v)
                        for k, v in stage.arguments
                    ),
                    reason=(
                        f"reads {files}: cycle_length=AUTOTUNE was fixed to ceil(cores / 3) = "
                        f"{cycle} when the dataset was made ({schedulable_cores()} cores); "
                        "only its parallelism is retuned; parallel_reads=N reads N at once"
                        + (
                            "; with deterministic=True the record order depends on the core count"
                            if dict(stage.arguments).get("deterministic") == "True"
                            else ""
                        )
                    ),
                )
        described.append(stage)
    return tuple(described)


def _autotuned_cycle(stage: PipelineStage) -> bool:
    return (
        stage.transformation == "interleave"
        and dict(stage.arguments).get("cycle_length") == AUTOTUNE_TEXT
    )
