"""The order in which tune tries the knobs, each on top of the best setup so far.

1. The baseline, exactly as given.
2. The input pipeline (TensorFlow), where the input is the limit: a compute-only probe (the
   same model fed one batch from memory) gives diagnose's input-bound fraction, and
   ``lint_pipeline`` reads a ``tf.data`` pipeline.
3. ``steps_per_execution``, doubling from the model's own value under its ``jit_compile``
   setting, then again from the model's own value with XLA flipped: the two lines are
   searched separately because XLA can help at one ``steps_per_execution`` and hurt at
   another. A line stops after two doublings in a row whose median ratio does not gain at
   least the noise floor (3 %) over the line's best, at a failure, or at the bound (the epoch
   length, the timed steps, callbacks).
4. The dtype policy ``recommend_precision`` recommends, if it is not the one in force.
5. Larger batches (``allow_batch_change`` only).

Every trial is measured against the baseline in alternated rounds; a trial is skipped when
the time left is less than 1.25 times the cost of the dearest recent trial (``_engine``).
"""

from __future__ import annotations

from collections.abc import Callable

import keras

from tfthroughput.diagnosis.verdict import DiagnosisThresholds
from tfthroughput.tuning import _device_augmentation, _pipeline
from tfthroughput.tuning._arguments import ARRAYS, BATCHED, PY_DATASET
from tfthroughput.tuning._engine import Search, policy_knob
from tfthroughput.tuning._epoch import divides
from tfthroughput.tuning._knob_line import double_along
from tfthroughput.tuning._status import FAILED

_BATCH_FACTORS = (2, 4)
Knob = Callable[[Search], None]


def training_knobs(settings) -> tuple[Knob, ...]:
    """The knobs the training search tries, in order, as its settings allow."""
    knobs: list[Knob] = [pipeline_knob] if settings.try_pipeline else []
    knobs += [steps_per_execution_lines, policy_knob]
    if settings.allow_batch_change:
        knobs.append(batch_knob)
    return tuple(knobs)


def pipeline_knob(search: Search) -> None:
    """The compute-only probe, then the rebuilt pipeline where the input is the limit or
    ``lint_pipeline`` finds something that costs speed (a ``PyDataset``: a note only)."""
    workload, notes = search.workload, search.notes
    data, fraction = workload.data, None
    x, y = data.first_batch()
    probe = search.try_setup(
        search.base_setup,
        same_arithmetic=False,
        label="compute only (one batch from memory)",
        feed=repeat_batch({"x": x, "y": y}, workload.timed_steps),
        probe=True,
    )
    if probe is not None and probe.ratio is not None:
        fraction = _pipeline.probe_fraction(probe.ratio)
    if data.kind == PY_DATASET:  # its input is the user's Python code: say, not rebuild
        notes.append(_pipeline.py_dataset_note(data.value, fraction))
        return
    workload.plan = plan = _pipeline.plan(data)
    threshold = DiagnosisThresholds().input_bound_fraction
    bound = fraction is not None and fraction >= threshold
    measured = "not measured" if fraction is None else f"{fraction:.2f}"
    if not bound and not plan.lint_rules:
        notes.append(
            f"input pipeline not tried: input-bound fraction {measured} (below diagnose's "
            f"{threshold}) and lint_pipeline found nothing that costs speed"
        )
        return
    why = [f"input-bound fraction {measured}"] + list(plan.lint_rules)
    notes.append("input pipeline tried: " + ", ".join(why))
    notes += list(plan.notes)
    search.try_setup(search.best[0].with_(pipeline=True), same_arithmetic=True)
    if bound:  # the input is the limit: a CPU augmentation may move to the step
        device_augmentation_knob(search)


def device_augmentation_knob(search: Search) -> None:
    """The pipeline's CPU augmentation moved into the training step (``DeviceAugmented``)."""
    size = search.best[0].batch_size
    dataset, why_not = _device_augmentation.device_dataset(search.workload.data, size)
    if dataset is None:
        if why_not:
            search.notes.append(f"augmentation in the training step not tried: {why_not}")
        return
    search.notes.append(
        "augmentation in the training step tried: the pipeline's augment_fn per batch in "
        "DeviceAugmented (a new random stream: loss checked at loss_tolerance)"
    )
    search.try_setup(search.best[0].with_(augment_on_device=True), same_arithmetic=False)


def steps_per_execution_lines(search: Search) -> None:
    """The line under the model's own XLA setting, then the line with XLA flipped."""
    current = search.best[0]
    _steps_per_execution_line(search, current.jit_compile, first=2)
    if search.settings.try_xla:
        _steps_per_execution_line(search, not current.jit_compile, first=1)


def _steps_per_execution_line(search: Search, jit: bool, first: int) -> None:
    current, best = search.best
    bound = min(search.settings.max_steps_per_execution, search.workload.steps)
    epoch = search.settings.epoch_steps

    def try_at(spe: int):
        if not divides(spe, epoch):
            note = f"steps_per_execution={spe} and above not tried: they do not divide the epoch"
            if note not in search.notes:
                search.notes.append(note + f" ({epoch} steps)")
            return None  # ends the line
        return search.try_setup(current.with_(steps_per_execution=spe, jit_compile=jit))

    double_along(
        search.base_setup.steps_per_execution * first,
        bound,
        try_at,
        lambda trial: trial.status == FAILED,
        line_best=best.ratio if jit == current.jit_compile and best else 1.0,
    )


def batch_knob(search: Search) -> None:
    """Batches 2x and 4x the given one, while the data holds them and they run."""
    data = search.workload.data
    if data.kind == BATCHED:
        search.notes.append("batch size not tried: the dataset is already batched")
        return
    for factor in _BATCH_FACTORS:
        size = data.batch_size * factor
        if data.kind == ARRAYS and size > len(keras.tree.flatten(data.value[0])[0]):
            return
        trial = search.try_setup(search.best[0].with_(batch_size=size), same_arithmetic=False)
        if trial is None or trial.status == FAILED:
            return


def repeat_batch(batch: dict, steps: int) -> dict:
    """``fit`` arguments that feed the same in-memory batch ``steps`` times (``y`` only where
    the data has labels: an unlabeled batch is fed as ``x`` alone, as ``fit`` would get it)."""
    import numpy as np

    tile = lambda array: np.concatenate([np.asarray(array)] * steps)  # noqa: E731
    size = int(keras.tree.flatten(batch["x"])[0].shape[0])
    feed = {"x": keras.tree.map_structure(tile, batch["x"]), "batch_size": size, "shuffle": False}
    if batch.get("y") is not None:
        feed["y"] = keras.tree.map_structure(tile, batch["y"])
    return feed
