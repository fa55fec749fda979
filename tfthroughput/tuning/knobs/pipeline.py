"""The input pipeline, in training: the compute-only probe, the rebuilt pipeline where the
input is the limit (and the CPU augmentation moved into the step), and the rebuilt pipeline
once more on the best setup.
"""

from __future__ import annotations

from tfthroughput.diagnosis.verdict import DiagnosisThresholds
from tfthroughput.tuning.engine.contract import Proposal, SearchView
from tfthroughput.tuning.engine.trial_model import failure_reason
from tfthroughput.tuning.knobs.lines import Line
from tfthroughput.tuning.training import pipeline as rebuilding

PROBE_LABEL = "compute only (one batch from memory)"


def pipeline_knob(view: SearchView) -> Line:
    """The compute-only probe, then the rebuilt pipeline where the input is the limit or
    ``lint_pipeline`` finds something that costs speed (a ``PyDataset``: a note only)."""
    data, fraction = view.mode.data, None
    probe = yield Proposal(view.base, label=PROBE_LABEL, probe=True)
    if probe is not None and probe.ratio is not None:
        fraction = rebuilding.probe_fraction(probe.ratio)
    if not data.rebuildable:  # its input is the user's Python code: say, not rebuild
        view.note(rebuilding.py_dataset_note(data.value, fraction))
        return view.best.ratio
    try:
        plan = view.mode.pipeline_plan()
    except Exception as error:  # noqa: BLE001 - an input it cannot read: one line, no raise
        view.note(f"input pipeline not tried: {failure_reason(error, 'train')}")
        return view.best.ratio
    threshold = DiagnosisThresholds().input_bound_fraction
    bound = fraction is not None and fraction >= threshold
    measured = "not measured" if fraction is None else f"{fraction:.2f}"
    if not bound and not plan.lint_rules:
        view.note(
            f"input pipeline not tried first: input-bound fraction {measured} (below "
            f"diagnose's {threshold}) and lint_pipeline found nothing that costs speed"
        )
        return view.best.ratio
    view.note(
        "input pipeline tried: "
        + ", ".join([f"input-bound fraction {measured}"] + list(plan.lint_rules))
    )
    for note in plan.notes:
        view.note(note)
    yield Proposal(view.best.setup.with_(pipeline=True))
    if bound:  # the input is the limit: a CPU augmentation may move to the step
        yield from device_augmentation_knob(view)
    return view.best.ratio


def pipeline_on_best_knob(view: SearchView) -> Line:
    """The rebuilt pipeline once more, on the best setup, where the first knob did not put it
    there: once ``steps_per_execution`` or a cheaper policy has cut the step's own cost, the
    input side is a larger share of each step, and a pipeline that was not the limit at the
    baseline can be (docs/tuning.md, "Why the search is shaped so")."""
    best = view.best.setup
    if not view.mode.data.rebuildable or best.pipeline or best.augment_on_device:
        return view.best.ratio
    try:
        view.mode.pipeline_plan()
    except Exception:  # noqa: BLE001 - noted by the first pipeline knob
        return view.best.ratio
    # Checked as the best setup's arithmetic asks: a policy in it changes the loss.
    trial = yield Proposal(best.with_(pipeline=True))
    if trial is not None:
        view.note(f"input pipeline tried on the best setup so far: {trial.status}")
    return view.best.ratio


def device_augmentation_knob(view: SearchView) -> Line:
    """The pipeline's CPU augmentation moved into the training step (``DeviceAugmented``)."""
    size = view.best.setup.batch_size
    dataset, why_not = rebuilding.device_dataset(view.mode.data, size)
    if dataset is None:
        if why_not:
            view.note(f"augmentation in the training step not tried: {why_not}")
        return view.best.ratio
    view.note(
        "augmentation in the training step tried: the pipeline's augment_fn per batch in "
        "DeviceAugmented (a new random stream: loss checked at loss_tolerance)"
    )
    yield Proposal(view.best.setup.with_(augment_on_device=True))
    return view.best.ratio
