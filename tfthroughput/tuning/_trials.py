"""One trial of tune at a time: a fresh runner, measured against the baseline, judged.

:class:`TrialRunner` holds the baseline's runner, every trial so far, the best setup, and the
time budget: a trial is skipped when the time left is less than 1.25 times the cost of the most
expensive of the last three trials. The order of the knobs is :mod:`tfthroughput.tuning._search`'s.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

import keras

from tfthroughput.tuning import _device_augmentation, _pipeline
from tfthroughput.tuning._arguments import TrainingData
from tfthroughput.tuning._measure import GPUWindows, compare
from tfthroughput.tuning._runner import Runner, TrialFailed
from tfthroughput.tuning._status import (
    FAILED,
    FASTER,
    PROBE,
    REJECTED,
)
from tfthroughput.tuning._trial_loop import TrialLoop
from tfthroughput.tuning._trial_verdict import as_given, measured, speed_status
from tfthroughput.tuning.loss_check import EXACT_TOLERANCE, LossCheck
from tfthroughput.tuning.result import TuneTrial
from tfthroughput.tuning.setup import TuneSetup

# Shortest timed run of the baseline: shorter runs measure the scheduler more than the steps
# (at a load of 10 on 2 cores, 13 ms runs of a JAX MLP spread from 0.16x to 13x).
_MIN_RUN_SECONDS = 0.1
_MAX_LENGTHENING = 64  # timed runs are at most this many times the warm-up


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
    epoch_steps: int | None = None  # the user's epoch: steps_per_execution must divide it
    confirm_rounds: int = 0  # rounds of the confirmation by whole epochs (0: none)
    callbacks: tuple = ()  # the user's, run in the confirmation's epochs


class TrialRunner(TrialLoop):
    """The baseline, and one trial at a time against it, within the time budget."""

    def __init__(
        self,
        build_model: Callable[[], keras.Model],
        data: TrainingData,
        settings: SearchSettings,
        clock: Callable[[], float],
        gpu: GPUWindows,
    ) -> None:
        super().__init__(build_model, data, settings, clock, gpu)
        self._plan: _pipeline.PipelinePlan | None = None
        self._base: Runner | None = None

    # ----------------------------------------------------------------------------- plan

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
        self._timed_steps = self._lengthen(runner, steps)
        self._base, self._base_setup = runner, runner.setup
        self._best = (runner.setup, None)
        self._costs.append(self._clock() - start)
        self._trials.append(TuneTrial(**as_given(runner)))

    def _lengthen(self, runner: Runner, steps: int) -> int:
        """Double the baseline's timed run until it lasts ``_MIN_RUN_SECONDS``; the warm-up
        (and so the loss check) keeps ``steps``."""
        while runner.run() < _MIN_RUN_SECONDS and runner.steps < steps * _MAX_LENGTHENING:
            runner.steps *= 2
            runner.set_feed(self._data.feed(self._data.batch_size, runner.steps))
        return runner.steps

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
        warmup, steps = self._steps, self._timed_steps
        if setup.batch_size and base.batch_size and setup.batch_size > base.batch_size:
            factor = setup.batch_size // base.batch_size
            warmup = max(setup.steps_per_execution, warmup // factor)
            steps = max(setup.steps_per_execution, steps // factor)
        warm, build = None, self._build_model
        if feed is None:
            feed, warm = self._feed(setup, steps)
        if setup.augment_on_device:  # tuning/_device_augmentation.py
            build = _device_augmentation.device_builder(self._build_model, feed["x"])
        runner = Runner(
            setup,
            build,
            feed,
            steps=steps,
            examples_per_step=self._examples_per_step(setup.batch_size),
            seed=self._settings.seed,
            clock=self._clock,
            warm_data=warm,
            warmup_steps=warmup,
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
        # The best is the faster trial with the highest median ratio (each was measured against
        # the baseline in its own rounds, so drift between trials cancels).
        if trial.status == FASTER and (
            self._best[1] is None or comparison.ratio > self._best[1].ratio
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
        else:
            status = speed_status(comparison)
        if setup.batch_size != self._base_setup.batch_size:
            notes.append("learning dynamics change (fewer, larger steps per epoch)")
        return TuneTrial(
            setup,
            label,
            status,
            **measured(comparison),
            warmup_seconds=runner.warmup_seconds,
            memory_mib=runner.memory_mib,
            loss_check=check,
            reason="; ".join(notes),
        )

    def _feed(self, setup: TuneSetup, steps: int) -> tuple[dict, Callable[[], None] | None]:
        if setup.augment_on_device:
            dataset, _ = _device_augmentation.device_dataset(self._data, setup.batch_size)
            return {"x": dataset, "shuffle": False}, None
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


def _repeat_batch(batch: dict, steps: int) -> dict:
    """``fit`` arguments that feed the same in-memory batch ``steps`` times (``y`` only where
    the data has labels: an unlabeled batch is fed as ``x`` alone, as ``fit`` would get it)."""
    import numpy as np

    tile = lambda array: np.concatenate([np.asarray(array)] * steps)  # noqa: E731
    size = int(keras.tree.flatten(batch["x"])[0].shape[0])
    feed = {"x": keras.tree.map_structure(tile, batch["x"]), "batch_size": size, "shuffle": False}
    if batch.get("y") is not None:
        feed["y"] = keras.tree.map_structure(tile, batch["y"])
    return feed
