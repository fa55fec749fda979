"""The input pipeline, in training: the compute-only probe, the rebuilt pipeline where the
input is the limit (and the CPU augmentation moved into the step), and the rebuilt pipeline
once more on the best setup.
"""

from __future__ import annotations

import keras

from tfthroughput._validation import leading_dimension
from tfthroughput.diagnosis.verdict import DiagnosisThresholds
from tfthroughput.tuning._arguments import PY_DATASET
from tfthroughput.tuning.engine.search import Search
from tfthroughput.tuning.engine.trial_model import failure_reason
from tfthroughput.tuning.knobs.steps_per_execution import line_again_on_a_new_best
from tfthroughput.tuning.training import pipeline as rebuilding


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
        fraction = rebuilding.probe_fraction(probe.ratio)
    if data.kind == PY_DATASET:  # its input is the user's Python code: say, not rebuild
        notes.append(rebuilding.py_dataset_note(data.value, fraction))
        return
    try:
        workload.plan = plan = rebuilding.plan(data)
    except Exception as error:  # noqa: BLE001 - an input it cannot read: one line, no raise
        notes.append(f"input pipeline not tried: {failure_reason(error, 'train')}")
        return
    threshold = DiagnosisThresholds().input_bound_fraction
    bound = fraction is not None and fraction >= threshold
    measured = "not measured" if fraction is None else f"{fraction:.2f}"
    if not bound and not plan.lint_rules:
        notes.append(
            f"input pipeline not tried first: input-bound fraction {measured} (below "
            f"diagnose's {threshold}) and lint_pipeline found nothing that costs speed"
        )
        return
    why = [f"input-bound fraction {measured}"] + list(plan.lint_rules)
    notes.append("input pipeline tried: " + ", ".join(why))
    notes += list(plan.notes)
    search.try_setup(search.best.setup.with_(pipeline=True), same_arithmetic=True)
    if bound:  # the input is the limit: a CPU augmentation may move to the step
        device_augmentation_knob(search)


def pipeline_on_best_knob(search: Search) -> None:
    """The rebuilt pipeline once more, on the best setup, where the first knob did not put it
    there: once ``steps_per_execution`` or a cheaper policy has cut the step's own cost, the
    input side is a larger share of each step, and a pipeline that was not the limit at the
    baseline can be. Where it becomes the best, ``steps_per_execution`` once more on it: a
    cheaper input side can move the line's best (measured: docs/tuning.md, "Why the search is
    shaped so")."""
    plan, best = search.workload.plan, search.best.setup
    if plan is None or best.pipeline or best.augment_on_device:
        return
    # Checked as the best setup's arithmetic asks: a policy in it changes the loss.
    trial = search.try_setup(best.with_(pipeline=True))
    if trial is not None:
        search.notes.append(f"input pipeline tried on the best setup so far: {trial.status}")
        line_again_on_a_new_best(search, best)


def device_augmentation_knob(search: Search) -> None:
    """The pipeline's CPU augmentation moved into the training step (``DeviceAugmented``)."""
    size = search.best.setup.batch_size
    dataset, why_not = rebuilding.device_dataset(search.workload.data, size)
    if dataset is None:
        if why_not:
            search.notes.append(f"augmentation in the training step not tried: {why_not}")
        return
    search.notes.append(
        "augmentation in the training step tried: the pipeline's augment_fn per batch in "
        "DeviceAugmented (a new random stream: loss checked at loss_tolerance)"
    )
    search.try_setup(search.best.setup.with_(augment_on_device=True), same_arithmetic=False)


def repeat_batch(batch: dict, steps: int) -> dict:
    """``fit`` arguments that feed the same in-memory batch ``steps`` times (``y`` only where
    the data has labels: an unlabeled batch is fed as ``x`` alone, as ``fit`` would get it)."""
    import numpy as np

    tile = lambda array: np.concatenate([np.asarray(array)] * steps)  # noqa: E731
    size = leading_dimension(batch["x"])
    feed = {"x": keras.tree.map_structure(tile, batch["x"]), "batch_size": size, "shuffle": False}
    if batch.get("y") is not None:
        feed["y"] = keras.tree.map_structure(tile, batch["y"])
    return feed
