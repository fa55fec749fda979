"""The knobs ``tune`` tries, each on top of the best setup so far, in each mode's order.

The order is data (:func:`training_knobs`, :func:`inference_knobs`) that the one search
(``_engine``) runs; a knob is a function of the search. A line of knob values doubles a knob
while its trials keep gaining (:func:`double_along`): it stops at its bound, at a trial that
ends it, or after ``PATIENCE`` doublings in a row without a gain. Every trial is measured
against the baseline in alternated rounds; a trial is skipped when the time left is less than
1.25 times the cost of the dearest recent trial (``_engine``).

Each mode's order, and why, is documented knob by knob below and in ``docs/tuning.md``
("What it tries, in order"; "Inference"). Training: the pipeline where the input is the limit,
the two ``steps_per_execution`` lines (XLA as compiled, then flipped), the policy (and the
line once more on it), larger batches where allowed, the pipeline on the best setup.
Inference: the batch line, XLA flipped, the ``steps_per_execution`` line, the policy. In
inference a trial joins the best setup only by beating it by the noise floor (3 %), so a knob
that gains nothing measurable is not added.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

from tfthroughput._validation import leading_dimension
from tfthroughput.diagnosis.verdict import DiagnosisThresholds
from tfthroughput.tuning import _device_augmentation, _pipeline
from tfthroughput.tuning._arguments import ARRAYS, BATCHED, PY_DATASET
from tfthroughput.tuning._engine import Search
from tfthroughput.tuning._epoch import divides
from tfthroughput.tuning._measure import MIN_NOISE
from tfthroughput.tuning._status import FAILED, OUTPUTS_DIFFER, OVER_LATENCY

PATIENCE = 2  # doublings in a row without a gain before a line stops
LINE_GAIN = MIN_NOISE  # a doubling gains when its ratio beats the line's best by this
LATENCY_SAMPLES = 5  # inference: single-batch calls per runner per round
_BATCH_FACTORS = (2, 4)  # training: batches tried, times the given one
_MAX_BATCH_FACTOR = 128  # inference: the largest batch tried, times the given one
_ENDS_AN_INFERENCE_LINE = (FAILED, OUTPUTS_DIFFER, OVER_LATENCY)
Knob = Callable[[Search], None]


def double_along(
    value: int,
    bound: int,
    try_at: Callable[[int], Any],
    ends: Callable[[Any], bool],
    *,
    line_best: float = 1.0,
) -> None:
    """Try ``try_at(value)``, doubling ``value`` up to ``bound``.

    Args:
        value: The first value tried.
        bound: The largest value tried.
        try_at: Runs the trial at a value; returns it, or ``None`` when the time budget ran out.
        ends: Whether a trial ends the line (a failure, a rejection); may note why.
        line_best: The ratio to the baseline that the first doubling must beat.
    """
    misses = 0
    while value <= bound and misses < PATIENCE:
        trial = try_at(value)
        if trial is None or ends(trial):
            return
        if trial.ratio > line_best * (1.0 + LINE_GAIN):
            line_best, misses = trial.ratio, 0
        else:
            misses += 1
        value *= 2


def policy_knob(search: Search) -> None:
    """The knob both modes try: the policy ``recommend_precision`` recommends, where it is not
    the one in force, on the best setup so far (a new arithmetic: its math is checked at the
    mode's tolerance). Where the best setup flipped XLA and the policy on top of it does not
    become the best, the policy is tried with XLA as given too: XLA on a CPU compiles bfloat16
    poorly (``benchmarks/tune.py``'s compute-bound MLP: bfloat16 1.19x on an XLA best at
    1.53x; without XLA, bfloat16 reached 2.4x), so the two knobs are not independent."""
    policy, given = search.settings.policy, search.base_setup
    if policy is None or policy == given.policy:
        return
    best = search.best[0]
    search.try_setup(best.with_(policy=policy))
    if best.jit_compile != given.jit_compile and search.best[0].policy != policy:
        search.try_setup(best.with_(policy=policy, jit_compile=given.jit_compile))


# ------------------------------------------------------------------------------ training


def training_knobs(settings: Any) -> tuple[Knob, ...]:
    """The knobs the training search tries, in order, as its settings allow."""
    knobs: list[Knob] = [pipeline_knob] if settings.try_pipeline else []
    knobs += [training_steps_per_execution_lines, training_policy_knob]
    if settings.allow_batch_change:
        knobs.append(training_batch_knob)
    if settings.try_pipeline:
        knobs.append(pipeline_on_best_knob)
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
            f"input pipeline not tried first: input-bound fraction {measured} (below "
            f"diagnose's {threshold}) and lint_pipeline found nothing that costs speed"
        )
        return
    why = [f"input-bound fraction {measured}"] + list(plan.lint_rules)
    notes.append("input pipeline tried: " + ", ".join(why))
    notes += list(plan.notes)
    search.try_setup(search.best[0].with_(pipeline=True), same_arithmetic=True)
    if bound:  # the input is the limit: a CPU augmentation may move to the step
        device_augmentation_knob(search)


def pipeline_on_best_knob(search: Search) -> None:
    """The rebuilt pipeline once more, on the best setup, where the first knob did not put it
    there: once ``steps_per_execution`` or a cheaper policy has cut the step's own cost, the
    input side is a larger share of each step, and a pipeline that was not the limit at the
    baseline can be. ``benchmarks/tune_grid.py`` found the rebuilt pipeline in the grid's best
    setup of all three training workloads, where the probe had not asked for it."""
    plan, best = search.workload.plan, search.best[0]
    if plan is None or best.pipeline or best.augment_on_device:
        return
    # Checked as the best setup's arithmetic asks: a policy in it changes the loss.
    trial = search.try_setup(best.with_(pipeline=True))
    if trial is not None:
        search.notes.append(f"input pipeline tried on the best setup so far: {trial.status}")


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


def training_steps_per_execution_lines(search: Search) -> None:
    """The line under the model's own XLA setting, then the line with XLA flipped."""
    current, given = search.best[0], search.base_setup.steps_per_execution
    _training_steps_per_execution_line(search, current.jit_compile, start=given * 2)
    if search.settings.try_xla:
        _training_steps_per_execution_line(search, not current.jit_compile, start=given)


def training_policy_knob(search: Search) -> None:
    """The recommended policy; where it becomes the best setup, ``steps_per_execution`` once
    more on it, from the best's value doubled: a cheaper step leaves the fixed cost of a call
    a larger share, so more steps per call can pay where they did not in float32
    (``benchmarks/tune_grid.py``'s compute-bound MLP: float32's line within the noise, the
    grid's best ``steps_per_execution=16`` in bfloat16)."""
    before = search.best[0]
    policy_knob(search)
    best = search.best[0]
    if best.policy != before.policy:
        start = best.steps_per_execution * 2
        _training_steps_per_execution_line(search, best.jit_compile, start=start)


def _training_steps_per_execution_line(search: Search, jit: bool, start: int) -> None:
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
        start,
        bound,
        try_at,
        lambda trial: trial.status == FAILED,
        line_best=best.ratio if jit == current.jit_compile and best else 1.0,
    )


def training_batch_knob(search: Search) -> None:
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
    size = leading_dimension(batch["x"])
    feed = {"x": keras.tree.map_structure(tile, batch["x"]), "batch_size": size, "shuffle": False}
    if batch.get("y") is not None:
        feed["y"] = keras.tree.map_structure(tile, batch["y"])
    return feed


# ----------------------------------------------------------------------------- inference


def inference_knobs(settings: Any) -> tuple[Knob, ...]:
    """The knobs the inference search tries, in order, as its settings allow."""
    knobs: list[Knob] = [inference_batch_line]
    if settings.try_xla:
        knobs.append(xla_knob)
    return (*knobs, inference_steps_per_execution_line, policy_knob)


def inference_batch_line(search: Search) -> None:
    """The batch size doubled while it gains, within the data and the latency limit."""
    data, notes = search.workload.data, search.notes
    if data.kind == BATCHED:
        notes.append(
            "batch size not tried: the dataset is already batched (pass it unbatched, "
            "with batch_size, to let tune try larger batches)"
        )
        return
    given = data.batch_size
    bound = given * _MAX_BATCH_FACTOR
    if data.kind == ARRAYS and data.examples < bound:
        bound = data.examples
        notes.append(f"batch size bounded by the {bound} examples in the data")
    limit = search.settings.max_batch_latency_ms
    if limit is not None:
        search.base.sample_latency(LATENCY_SAMPLES)
        if search.base.latency_ms(0.95) > limit:
            notes.append(
                f"batch size not raised: the given batch's p95 latency "
                f"({search.base.latency_ms(0.95):.2f} ms) already exceeds the limit "
                f"({limit:g} ms)"
            )
            return

    def ends(trial: Any) -> bool:
        if trial.status == OVER_LATENCY:
            notes.append(
                f"batch size bounded by the latency limit: {trial.setup.batch_size} takes "
                f"{trial.latency_p95_ms:.2f} ms per batch (p95), over {limit:g} ms"
            )
        return trial.status in _ENDS_AN_INFERENCE_LINE

    double_along(
        given * 2, bound, lambda size: search.try_setup(search.best[0].with_(batch_size=size)), ends
    )


def xla_knob(search: Search) -> None:
    """XLA flipped on the best setup so far."""
    best = search.best[0]
    search.try_setup(best.with_(jit_compile=not best.jit_compile))


def inference_steps_per_execution_line(search: Search) -> None:
    """``steps_per_execution`` doubled from twice the model's own, up to the smallest power of
    two that runs one ``predict`` call on the arrays in one execution (a call of 5 batches: 8):
    the user's call is what it groups, and a value past that call's batches changes nothing
    in it. For a dataset of unknown size, up to half the batches of the search's timed run."""
    current, given = search.best[0], search.base_setup.steps_per_execution
    examples, size = search.workload.data.examples, current.batch_size
    if examples is None or size is None:
        bound = max(1, search.workload.timed_batches(search, current) // 2)
    else:
        batches = -(-examples // size)
        bound = 1 << (batches - 1).bit_length()
        if bound < given * 2:
            search.notes.append(
                f"steps_per_execution above {given} not tried: one predict call on the "
                f"{examples} examples is {batches} batch{'es' if batches > 1 else ''} of {size}"
            )
            return
    double_along(
        given * 2,
        min(search.settings.max_steps_per_execution, bound),
        lambda value: search.try_setup(current.with_(steps_per_execution=value)),
        lambda trial: trial.status in _ENDS_AN_INFERENCE_LINE,
        line_best=search.best[1].ratio if search.best[1] else 1.0,
    )
