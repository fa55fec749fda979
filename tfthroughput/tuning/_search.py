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
the time left is less than the cost of the most expensive trial so far.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

import keras

from tfthroughput.diagnosis.verdict import DiagnosisThresholds
from tfthroughput.tuning import _pipeline
from tfthroughput.tuning._arguments import ARRAYS, BATCHED, TrainingData
from tfthroughput.tuning._measure import MIN_NOISE, Comparison, GPUWindows, compare
from tfthroughput.tuning._runner import Runner, TrialFailed
from tfthroughput.tuning.loss_check import EXACT_TOLERANCE, LossCheck
from tfthroughput.tuning.result import (
    BASELINE,
    FAILED,
    FASTER,
    NOT_FASTER,
    PROBE,
    REJECTED,
    SLOWER,
    TuneResult,
    TuneTrial,
)
from tfthroughput.tuning.setup import TuneSetup

_PATIENCE = 2  # doublings in a row without a gain before a steps_per_execution line stops
# The gain in median ratio a doubling must bring for its line to go on (the noise floor).
_LINE_GAIN = MIN_NOISE
_BATCH_FACTORS = (2, 4)


@dataclass(frozen=True)
class SearchSettings:
    steps: int
    rounds: int
    time_budget: float
    loss_tolerance: float
    seed: int
    max_steps_per_execution: int
    policy: str | None  # the recommended policy to try, or None
    try_pipeline: bool
    try_xla: bool
    allow_batch_change: bool
    notes: tuple[str, ...]


class Search:
    """One run of the search; :meth:`run` returns the :class:`TuneResult`."""

    def __init__(
        self,
        build_model: Callable[[], keras.Model],
        data: TrainingData,
        settings: SearchSettings,
        clock: Callable[[], float],
        gpu: GPUWindows,
    ) -> None:
        self._build_model = build_model
        self._data = data
        self._settings = settings
        self._clock = clock
        self._gpu = gpu
        self._start = clock()
        self._costs: list[float] = []
        self._trials: list[TuneTrial] = []
        self._notes = list(settings.notes)
        self._stopped = False
        self._plan: _pipeline.PipelinePlan | None = None
        self._base: Runner | None = None
        self._base_setup: TuneSetup | None = None
        self._best: tuple[TuneSetup, Comparison | None] | None = None
        self._baseline_speeds: tuple[float, ...] = ()

    # ----------------------------------------------------------------------------- plan

    def run(self) -> TuneResult:
        self._measure_baseline()
        try:
            if self._settings.try_pipeline:
                self._pipeline_knob()
            current = self._best[0]
            self._steps_per_execution_line(current.jit_compile, first=2)
            if self._settings.try_xla:
                self._steps_per_execution_line(not current.jit_compile, first=1)
            policy = self._settings.policy
            if policy is not None and policy != self._base_setup.policy:
                self._try(self._best[0].with_(policy=policy), same_arithmetic=False)
            if self._settings.allow_batch_change:
                self._batch_knob()
        finally:
            self._base.close()
        chosen = self._best[0]
        if self._baseline_speeds:
            self._trials[0] = replace(
                self._trials[0],
                examples_per_second=statistics.median(self._baseline_speeds),
                ratio=1.0,
            )
        return TuneResult(
            baseline=self._base_setup,
            chosen=chosen,
            trials=tuple(self._trials),
            seconds=self._clock() - self._start,
            time_budget=self._settings.time_budget,
            stopped_by_budget=self._stopped,
            pipeline_kwargs=(
                dict(self._plan.build_pipeline_kwargs) if chosen.pipeline and self._plan else None
            ),
            notes=tuple(self._notes + self._chosen_notes(chosen)),
        )

    def _measure_baseline(self) -> None:
        start = self._clock()
        probe = self._build_model()
        given = probe if isinstance(probe, keras.Model) else None
        first_spe = int(getattr(given, "steps_per_execution", 1) or 1)
        del probe, given
        steps = first_spe
        while steps < self._settings.steps:
            steps *= 2
        self._steps = steps
        runner = Runner(
            None,
            self._build_model,
            self._data.feed(self._data.batch_size, steps),
            steps=steps,
            examples_per_step=self._examples_per_step(self._data.batch_size),
            seed=self._settings.seed,
            clock=self._clock,
            batch_size=self._data.batch_size,
        )
        try:
            runner.start(user_model_errors=True)
        except TrialFailed as error:
            raise RuntimeError(
                f"The model as given cannot be trained, so there is nothing to tune: {error}"
            ) from error
        self._base, self._base_setup = runner, runner.setup
        self._best = (runner.setup, None)
        self._costs.append(self._clock() - start)
        self._trials.append(
            TuneTrial(
                runner.setup,
                "as given: " + _describe(runner.setup),
                BASELINE,
                warmup_seconds=runner.warmup_seconds,
                memory_bytes=runner.memory_bytes,
                reason="; ".join(runner.notes),
            )
        )

    def _pipeline_knob(self) -> None:
        fraction = None
        x, y = self._data.first_batch()
        held = {"x": x, "y": y}
        probe = self._try(
            self._base_setup,
            same_arithmetic=False,
            label="compute only (one batch from memory)",
            feed=_repeat_batch(held, self._steps),
            probe=True,
        )
        if probe is not None and probe.ratio is not None:
            fraction = _pipeline.probe_fraction(probe.ratio)
        self._plan = _pipeline.plan(self._data)
        threshold = DiagnosisThresholds().input_bound_fraction
        bound = fraction is not None and fraction >= threshold
        measured = "not measured" if fraction is None else f"{fraction:.2f}"
        if not bound and not self._plan.lint_rules:
            self._notes.append(
                f"input pipeline not tried: input-bound fraction {measured} (below diagnose's "
                f"{threshold}) and lint_pipeline found nothing that costs speed"
            )
            return
        why = [f"input-bound fraction {measured}"] + list(self._plan.lint_rules)
        self._notes.append("input pipeline tried: " + ", ".join(why))
        self._notes += list(self._plan.notes)
        self._try(self._best[0].with_(pipeline=True), same_arithmetic=True)

    def _steps_per_execution_line(self, jit: bool, first: int) -> None:
        current = self._best[0]
        bound = min(self._settings.max_steps_per_execution, self._steps)
        spe = self._base_setup.steps_per_execution * first
        line_best = self._best[1].ratio if jit == current.jit_compile and self._best[1] else 1.0
        misses = 0
        while spe <= bound and misses < _PATIENCE:
            trial = self._try(current.with_(steps_per_execution=spe, jit_compile=jit))
            if trial is None or trial.status == FAILED:
                return
            if trial.ratio > line_best * (1.0 + _LINE_GAIN):
                line_best, misses = trial.ratio, 0
            else:
                misses += 1
            spe *= 2

    def _batch_knob(self) -> None:
        if self._data.kind == BATCHED:
            self._notes.append("batch size not tried: the dataset is already batched")
            return
        for factor in _BATCH_FACTORS:
            size = self._data.batch_size * factor
            if self._data.kind == ARRAYS and size > len(keras.tree.flatten(self._data.value[0])[0]):
                return
            trial = self._try(self._best[0].with_(batch_size=size), same_arithmetic=False)
            if trial is None or trial.status == FAILED:
                return

    # ----------------------------------------------------------------------- one trial

    def _out_of_time(self) -> bool:
        elapsed = self._clock() - self._start
        if elapsed + max(self._costs[-3:]) > self._settings.time_budget:
            self._stopped = True
        return self._stopped

    def _try(
        self,
        setup: TuneSetup,
        *,
        same_arithmetic: bool | None = None,
        label: str | None = None,
        feed: dict | None = None,
        probe: bool = False,
    ) -> TuneTrial | None:
        if self._out_of_time():
            return None
        start = self._clock()
        base = self._base_setup
        if same_arithmetic is None:
            same_arithmetic = setup.jit_compile == base.jit_compile
        steps = self._steps
        if setup.batch_size and base.batch_size and setup.batch_size > base.batch_size:
            steps = max(setup.steps_per_execution, steps * base.batch_size // setup.batch_size)
        warm = None
        if feed is None:
            feed, warm = self._feed(setup, steps)
        runner = Runner(
            setup,
            self._build_model,
            feed,
            steps=steps,
            examples_per_step=self._examples_per_step(setup.batch_size),
            seed=self._settings.seed,
            clock=self._clock,
            warm_data=warm,
        )
        label = label or setup.changes_from(base)
        try:
            runner.start()
            comparison = compare(self._base, runner, self._settings.rounds, self._gpu)
        except TrialFailed as error:
            trial = TuneTrial(setup, label, FAILED, reason=str(error))
            comparison = None
        else:
            trial = self._judge(setup, label, runner, comparison, same_arithmetic, probe)
        finally:
            runner.close()
            del runner
            gc.collect()
        if comparison is not None:
            self._baseline_speeds += comparison.baseline_speeds
        self._costs.append(self._clock() - start)
        self._trials.append(trial)
        # The best is the one with the highest lowest round: the gain it kept in every round,
        # not a median that one lucky round can lift.
        if trial.status == FASTER and (
            self._best[1] is None or comparison.ratio_low > self._best[1].ratio_low
        ):
            self._best = (setup, comparison)
        return trial

    def _judge(self, setup, label, runner, comparison, same_arithmetic, probe) -> TuneTrial:
        check = None
        if not probe:
            tolerance = EXACT_TOLERANCE if same_arithmetic else self._settings.loss_tolerance
            check = LossCheck(
                self._base.warmup_loss, runner.warmup_loss, same_arithmetic, tolerance
            )
        notes = list(runner.notes)
        if probe:
            status = PROBE
        elif not check.passed:
            status = REJECTED
        elif comparison.faster:
            status = FASTER
        elif comparison.ratio_high < 1.0 - comparison.noise:
            status = SLOWER
        else:
            status = NOT_FASTER
        if setup.batch_size != self._base_setup.batch_size:
            notes.append("learning dynamics change (fewer, larger steps per epoch)")
        return TuneTrial(
            setup,
            label,
            status,
            examples_per_second=comparison.examples_per_second,
            ratio=comparison.ratio,
            ratio_low=comparison.ratio_low,
            ratio_high=comparison.ratio_high,
            noise=comparison.noise,
            warmup_seconds=runner.warmup_seconds,
            memory_bytes=runner.memory_bytes,
            gpu_utilization=comparison.gpu_utilization,
            sm_activity=comparison.sm_activity,
            loss_check=check,
            reason="; ".join(notes),
        )

    def _feed(self, setup: TuneSetup, steps: int) -> tuple[dict, Callable[[], None] | None]:
        if not setup.pipeline:
            return self._data.feed(setup.batch_size, steps), None
        dataset = _pipeline.rebuilt(self._data, self._plan, setup.batch_size)
        batches = self._data.epoch_batches
        if batches is not None and setup.batch_size and self._data.batch_size:
            batches = -(-batches * self._data.batch_size // setup.batch_size)
        cached = self._plan.build_pipeline_kwargs["cache"]
        warm = (lambda: _pipeline.fill_cache(dataset, batches)) if cached else None
        return {"x": dataset, "shuffle": False}, warm

    def _examples_per_step(self, batch_size: int | None) -> int:
        if batch_size is not None:
            return batch_size
        if not hasattr(self, "_batch_examples"):
            x, _ = self._data.first_batch()
            self._batch_examples = int(keras.tree.flatten(x)[0].shape[0])
        return self._batch_examples

    def _chosen_notes(self, chosen: TuneSetup) -> list[str]:
        notes = []
        if chosen.batch_size != self._base_setup.batch_size:
            notes.append(
                f"the chosen batch size ({chosen.batch_size}, from {self._base_setup.batch_size}) "
                "changes the learning dynamics: fewer optimizer steps per epoch; retune the "
                "learning rate. Gradient accumulation (with_gradient_accumulation) can only make "
                "the effective batch larger, not keep the smaller one"
            )
        if chosen.policy != self._base_setup.policy:
            notes.append(f"build the model under mixed_precision({chosen.policy!r})")
        return notes


def _describe(setup: TuneSetup) -> str:
    batch = "" if setup.batch_size is None else f", batch {setup.batch_size}"
    xla = "on" if setup.jit_compile else "off"
    return f"steps_per_execution={setup.steps_per_execution}, XLA {xla}, {setup.policy}{batch}"


def _repeat_batch(batch: dict, steps: int) -> dict:
    """``fit`` arguments that feed the same in-memory batch ``steps`` times."""
    import numpy as np

    tile = lambda array: np.concatenate([np.asarray(array)] * steps)  # noqa: E731
    size = int(keras.tree.flatten(batch["x"])[0].shape[0])
    return {
        "x": keras.tree.map_structure(tile, batch["x"]),
        "y": keras.tree.map_structure(tile, batch["y"]),
        "batch_size": size,
        "shuffle": False,
    }
