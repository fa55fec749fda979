"""A readable account of what :func:`tfthroughput.build_pipeline` built, and why."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import tensorflow as tf

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
            ``autotune.ram_budget`` (bytes, ``None`` = tf.data's default of half the RAM),
            ``threading.private_threadpool_size`` (``None`` = TensorFlow's shared pool).
        element_spec: The returned dataset's ``element_spec``, as text.
    """

    source: str
    stages: tuple[PipelineStage, ...]
    options: dict[str, object] = field(default_factory=dict)
    element_spec: str = ""

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
        if any(AUTOTUNE_TEXT in str(stage) for stage in self.stages):
            lines.append(
                "AUTOTUNE values are chosen by tf.data while the pipeline runs (and retuned as "
                "it runs); the TensorBoard profiler's trace viewer shows what it picked."
            )
        return "\n".join(lines)


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
        "autotune.ram_budget": options.autotune.ram_budget,
        "threading.private_threadpool_size": options.threading.private_threadpool_size,
    }


def describe_pipeline(dataset: tf.data.Dataset) -> PipelineDescription:
    """Describe the stages and options of a dataset built by :func:`build_pipeline`.

    Args:
        dataset: A dataset exactly as :func:`tfthroughput.build_pipeline` returned it. Any
            further transformation (``.take()``, ``.map()``, ...) makes a new dataset that the
            builder did not build.

    Returns:
        A frozen :class:`PipelineDescription`; ``print()`` it for a numbered list of stages.
        Its options are read from ``dataset.options()``, so they are the dataset's own.

    Raises:
        TypeError: If ``dataset`` is not a ``tf.data.Dataset``.
        ValueError: If ``dataset`` was not returned by ``build_pipeline``.

    Example:
        >>> ds = build_pipeline(tf.data.Dataset.range(8), batch_size=4)
        >>> describe_pipeline(ds).transformations
        ('batch', 'prefetch')
    """
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"`dataset` must be a tf.data.Dataset. Received: dataset={dataset!r} "
            f"of type {type(dataset).__name__}"
        )
    recorded = _DESCRIPTIONS.get(dataset)
    if recorded is None:
        raise ValueError(
            "`dataset` was not returned by build_pipeline (a transformation applied afterwards "
            "makes a new dataset); describe the dataset build_pipeline returned. "
            f"Received: dataset={dataset!r}"
        )
    return PipelineDescription(
        source=recorded.source,
        stages=recorded.stages,
        options=_options_of(dataset),
        element_spec=str(dataset.element_spec),
    )
