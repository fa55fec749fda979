"""The knobs the training search tries, in order (:func:`training_knobs`): the pipeline where
the input is the limit, the ``steps_per_execution`` line (XLA as compiled), XLA flipped around
that line's best, the policy (and the line once more on it), larger batches where allowed, the
pipeline on the best setup (and the line once more on it). Why each, and why in that order:
below and in ``docs/tuning.md`` ("What it tries, in order").
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
from tfthroughput.tuning._knobs import (
    Knob,
    double_along,
    doublings,
    gains,
    halvings,
    policy_knob,
    walk_along,
)
from tfthroughput.tuning._status import FAILED
from tfthroughput.tuning.setup import TuneSetup

_BATCH_FACTORS = (2, 4)  # batches tried, times the given one


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
    setup of all three training workloads, where the probe had not asked for it. Where it
    becomes the best, ``steps_per_execution`` once more on it: the grid's compute-bound best
    was bfloat16 with the pipeline at 16, where the line without the pipeline had stopped at 2
    (0.84 of the best, every re-timed round below 0.91)."""
    plan, best = search.workload.plan, search.best[0]
    if plan is None or best.pipeline or best.augment_on_device:
        return
    # Checked as the best setup's arithmetic asks: a policy in it changes the loss.
    trial = search.try_setup(best.with_(pipeline=True))
    if trial is not None:
        search.notes.append(f"input pipeline tried on the best setup so far: {trial.status}")
        _line_again_on_a_new_best(search, best)


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
    """The line under the model's own XLA setting, then XLA flipped around that line's best."""
    current, given = search.best[0], search.base_setup.steps_per_execution
    _training_steps_per_execution_line(search, current.jit_compile, start=given * 2)
    if search.settings.try_xla:
        _flipped_xla_around_the_best(search, not current.jit_compile)


def training_policy_knob(search: Search) -> None:
    """The recommended policy; where it becomes the best setup, ``steps_per_execution`` once
    more on it, from the best's value doubled: a cheaper step leaves the fixed cost of a call
    a larger share, so more steps per call can pay where they did not in float32
    (``benchmarks/tune_grid.py``'s compute-bound MLP: float32's line within the noise, the
    grid's best ``steps_per_execution=16`` in bfloat16)."""
    before = search.best[0]
    policy_knob(search)
    _line_again_on_a_new_best(search, before)


def _line_again_on_a_new_best(search: Search, before: TuneSetup) -> None:
    """Where the knob just tried made a new best (a cheaper policy, the rebuilt pipeline),
    ``steps_per_execution`` once more on it, from the best's value doubled: with the step's
    own cost cut, the fixed cost of a call is a larger share, and a line that stopped within
    the noise can gain."""
    best = search.best[0]
    if best != before:
        start = best.steps_per_execution * 2
        _training_steps_per_execution_line(search, best.jit_compile, start=start)


def _training_steps_per_execution_line(search: Search, jit: bool, start: int) -> None:
    current = search.best[0]
    double_along(
        start,
        _training_spe_bound(search),
        _training_spe_trial(search, current, jit),
        lambda trial: trial.status == FAILED,
        line_best=search.best_ratio if jit == current.jit_compile else 1.0,
    )


def _flipped_xla_around_the_best(search: Search, jit: bool) -> None:
    """XLA flipped at the best ``steps_per_execution`` so far, then doubled up from it and
    halved down from it (down to the model's own) while it gains over the best setup: each
    row from that value ends after two values in a row without a gain, the first one counted.

    Searched apart from the first line because XLA can help at one value and hurt at another
    (issue 17: 63k vs 54k examples/s at 32 with and without XLA, 54k vs 95k at 128), and
    around that line's best because a whole second line from the model's own value spent most
    of the search's time below it: on ``benchmarks/tune.py``'s input-bound workload the flipped
    line from 1 took 7 trials (about 21 s of 51 s), all below the first line's best.
    """
    current = search.best[0]
    value, try_at = current.steps_per_execution, _training_spe_trial(search, current, jit)
    line_best = search.best_ratio
    trial = try_at(value)
    if trial is None or trial.status == FAILED:
        return
    missed = 0 if gains(trial, line_best) else 1  # the first value of each row
    if not missed:
        line_best = trial.ratio
    ends = lambda trial: trial.status == FAILED  # noqa: E731
    up = doublings(value * 2, _training_spe_bound(search))
    line_best = walk_along(up, try_at, ends, line_best=line_best, misses=missed)
    down = halvings(value // 2, search.base_setup.steps_per_execution)
    walk_along(down, try_at, ends, line_best=line_best, misses=missed)


def _training_spe_bound(search: Search) -> int:
    return min(search.settings.max_steps_per_execution, search.workload.steps)


def _training_spe_trial(search: Search, current: Any, jit: bool) -> Callable[[int], Any]:
    """A trial of ``current`` at a ``steps_per_execution`` under ``jit``: ``None`` (the line
    ends) at a value that does not divide the epoch, noted once."""
    epoch = search.settings.epoch_steps

    def try_at(spe: int):
        if not divides(spe, epoch):
            note = f"steps_per_execution={spe} and above not tried: they do not divide the epoch"
            if note not in search.notes:
                search.notes.append(note + f" ({epoch} steps)")
            return None
        return search.try_setup(current.with_(steps_per_execution=spe, jit_compile=jit))

    return try_at


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
