"""The input-pipeline knob (TensorFlow only): when to try it, and the rebuilt pipeline.

It is tried only where the input is the limit: ``lint_pipeline`` finds something in a
``tf.data`` pipeline, or the compute-only probe (the same model trained on one batch held in
memory, as ``diagnose`` measures it) shows an input-bound fraction at or above
``diagnose``'s threshold. The rebuilt pipeline is what :func:`tfthroughput.build_pipeline`
makes of the same data: a ``cache`` where the data is finite and has no shuffle or random op
(so every pass yields the same examples), ``repeat``, ``prefetch(AUTOTUNE)`` last, and tf.data's
options (autotuning, parallel map, deterministic order, so the loss check still applies).
Arrays are shuffled every pass over all their examples after the cache, as ``fit`` shuffles
arrays by default: the tuned ``fit`` trains on what the user's did (the loss check then holds
the rebuilt pipeline to the input's measured pass-to-pass variation).

Where the input is the limit, a CPU augmentation of ``build_pipeline``'s may move into the
training step: the same pipeline rebuilt with ``augment_on="device"``, each fresh model trained
inside :class:`~tfthroughput.data.DeviceAugmented` (a new random stream: loss checked at
``loss_tolerance``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np

from tfthroughput._optional import import_tensorflow
from tfthroughput._validation import leading_dimension
from tfthroughput.data.keras_inputs import describe_workers
from tfthroughput.diagnosis.verdict import DiagnosisThresholds, input_bound_fraction
from tfthroughput.tuning.training.data import TrainingData

# Lint rules about speed (not about reproducibility).
_SPEED_RULES = frozenset(
    {
        "no-final-prefetch",
        "sequential-map",
        "sequential-file-reads",
        "per-example-work-after-batch",
        "sequential-generator",
    }
)


@dataclass(frozen=True)
class PipelinePlan:
    """The rebuilt pipeline and why it is tried.

    Attributes:
        build_pipeline_kwargs: Arguments for ``tfthroughput.build_pipeline(data, ...)``.
        lint_rules: Speed findings of ``lint_pipeline`` (empty for arrays).
        notes: What the rebuild does and does not change, as sentences.
    """

    build_pipeline_kwargs: dict[str, Any]
    lint_rules: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())


def lint_rules(data: TrainingData) -> tuple[str, ...]:
    """Speed findings of ``lint_pipeline`` for a dataset (none for arrays)."""
    if data.dataset is None:
        return ()
    from tfthroughput.data.lint import lint_pipeline

    return tuple(rule for rule in lint_pipeline(data.dataset).rules if rule in _SPEED_RULES)


def probe_fraction(compute_only_ratio: float) -> float:
    """diagnose's input-bound fraction from the compute-only probe's ratio to the baseline."""
    return input_bound_fraction(compute_only_ratio, 1.0)


def py_dataset_note(py_dataset: Any, fraction: float | None) -> str:
    """What the compute-only probe says of a ``keras.utils.PyDataset``'s input side (it is the
    user's Python code and workers: measured and reported, not rebuilt)."""
    measured = "not measured" if fraction is None else f"{fraction:.2f}"
    workers = describe_workers(py_dataset)
    head = f"input side: a PyDataset with {workers}, input-bound fraction {measured}"
    threshold = DiagnosisThresholds().input_bound_fraction
    if fraction is None or fraction < threshold:
        return f"{head} (below diagnose's {threshold}): the input keeps up"
    return (
        f"{head} (at or above diagnose's {threshold}): the steps wait on it; more `workers` "
        "(with use_multiprocessing=True where __getitem__ holds the GIL) or a tf.data pipeline "
        "(tfthroughput.build_pipeline) would feed them faster. The pipeline knob does not "
        "rebuild a PyDataset"
    )


def plan(data: TrainingData) -> PipelinePlan:
    """What the rebuilt pipeline will be for ``data``."""
    import_tensorflow("tfthroughput.tune's pipeline knob")
    notes = []
    cacheable = data.epoch_batches is not None
    if data.dataset is not None:
        from tfthroughput.data.lint import random_stages

        random = random_stages(data.dataset)
        if random:
            cacheable = False
            notes.append(f"not cached: {random[0]} is random, a cache would freeze it")
    if data.epoch_batches is None:
        notes.append("not cached: the dataset is infinite or of unknown length")
    if cacheable:
        notes.append("cached in memory after the first pass (the first epoch still reads it)")
    shuffle = {}
    if data.shuffled_by_fit:
        examples = data.examples
        shuffle = {"shuffle_buffer": examples}
        notes.append(
            f"shuffled every pass over all {examples} examples, as fit shuffles arrays by default"
        )
    notes.append(
        "a map of a stateful function (tf.py_function, ...) stays sequential: see lint_pipeline"
    )
    return PipelinePlan(
        build_pipeline_kwargs={
            "batch_size": data.batch_size,
            "cache": cacheable,
            "deterministic": True,
            "repeat": True,
            **shuffle,
        },
        lint_rules=lint_rules(data),
        notes=tuple(notes),
    )


def rebuilt(data: TrainingData, pipeline: PipelinePlan, batch_size: int | None) -> Any:
    """The rebuilt dataset (infinite), at ``batch_size`` where the data can be re-batched."""
    from tfthroughput.data.pipeline import build_pipeline

    kwargs = dict(pipeline.build_pipeline_kwargs)
    if data.batch_size is not None:  # a batched dataset keeps its own batches
        kwargs["batch_size"] = batch_size
    return build_pipeline(data.pipeline_source(), **kwargs)


def fill_cache(dataset: Any, batches: int | None) -> None:
    """Read one full pass, so that the cache is complete before anything is timed."""
    if batches is None:
        return
    iterator = iter(dataset)
    for _ in range(batches + 1):
        next(iterator)


def repeat_batch(batch: dict, steps: int) -> dict:
    """``fit`` arguments that feed the same in-memory batch ``steps`` times (``y`` only where
    the data has labels: an unlabeled batch is fed as ``x`` alone, as ``fit`` would get it)."""
    tile = lambda array: np.concatenate([np.asarray(array)] * steps)  # noqa: E731
    size = leading_dimension(batch["x"])
    feed = {"x": keras.tree.map_structure(tile, batch["x"]), "batch_size": size, "shuffle": False}
    if batch.get("y") is not None:
        feed["y"] = keras.tree.map_structure(tile, batch["y"])
    return feed


def device_dataset(data: TrainingData, batch_size: int | None) -> tuple[Any, str]:
    """The pipeline rebuilt with ``augment_on="device"`` (repeating), or ``None`` and why not
    (``""`` where the knob does not apply: no CPU augmentation of ``build_pipeline``'s)."""
    if data.dataset is None:
        return None, ""
    from tfthroughput.data.device_augmentation import rebuilt as rebuilt_on_device

    changes: dict[str, Any] = {"augment_on": "device", "repeat": True}
    if batch_size is not None:
        changes["batch_size"] = batch_size
    try:
        dataset = rebuilt_on_device(data.value, **changes)
    except (TypeError, ValueError) as error:
        return None, str(error).split(". Received:")[0]
    return dataset, ""


def device_builder(
    build_model: Callable[[], keras.Model], dataset: Any
) -> Callable[[], keras.Model]:
    """A model builder for the trial: the user's model in ``DeviceAugmented``, compiled alike."""
    from tfthroughput.data.device_augmented import DeviceAugmented

    def build() -> keras.Model:
        model = build_model()
        if not getattr(model, "compiled", False):
            return model  # refused by the runner's own model check, with its message
        trainer = DeviceAugmented(model, dataset)
        trainer.compile_from_config(model.get_compile_config())
        return trainer

    return build
