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
the time left is less than 1.25 times the cost of the dearest recent trial.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import keras

from tfthroughput.diagnosis.verdict import DiagnosisThresholds
from tfthroughput.tuning import _device_augmentation, _pipeline
from tfthroughput.tuning._arguments import ARRAYS, BATCHED, PY_DATASET
from tfthroughput.tuning._epoch import divides
from tfthroughput.tuning._measure import MIN_NOISE
from tfthroughput.tuning._runner import Runner
from tfthroughput.tuning._status import FAILED
from tfthroughput.tuning._trials import SearchSettings, TrialRunner, _repeat_batch
from tfthroughput.tuning._whole_epochs import epoch_feed, epoch_plan
from tfthroughput.tuning.confirmation import Confirmation, WholeRuns, confirm
from tfthroughput.tuning.result import TuneResult
from tfthroughput.tuning.setup import TuneSetup

__all__ = ["Search", "SearchSettings"]

_PATIENCE = 2  # doublings in a row without a gain before a steps_per_execution line stops
# The gain in median ratio a doubling must bring for its line to go on (the noise floor).
_LINE_GAIN = MIN_NOISE
_BATCH_FACTORS = (2, 4)


class Search(TrialRunner):
    """One run of the search; :meth:`run` returns the :class:`TuneResult`."""

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
        seconds = self._clock() - self._start  # the search's own: the confirmation has its own
        confirmation = self._confirm()
        chosen = self._best[0] if confirmation is None else confirmation.setup
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
            seconds=seconds,
            time_budget=self._settings.time_budget,
            stopped_by_budget=self._stopped,
            pipeline_kwargs=(
                dict(self._plan.build_pipeline_kwargs) if chosen.pipeline and self._plan else None
            ),
            notes=tuple(self._notes + self._chosen_notes(chosen)),
            confirmation=confirmation,
        )

    def _confirm(self) -> Confirmation | None:
        """The search's pick against a rebuilt baseline by whole ``fit`` epochs of the user's
        data (``tuning/confirmation.py``); ``None`` where nothing beat the baseline."""
        base = self._base_setup
        base_step = self._examples_per_step(base.batch_size)
        speed = statistics.median(self._baseline_speeds or [1.0])
        candidates, most = self._to_confirm(speed, self._timed_steps * base_step)
        if not candidates:
            return None
        multiple = max(s.steps_per_execution for s, _ in [(base, ""), *candidates])
        epoch = self._settings.epoch_steps

        def start(setup: TuneSetup) -> WholeRuns:
            step = self._examples_per_step(setup.batch_size)
            plan = epoch_plan(self._data, setup.batch_size, step, epoch, most, multiple)
            feed, warm = epoch_feed(self._data, setup, plan, self._plan, epoch)
            build = self._build_model
            if setup.augment_on_device:
                build = _device_augmentation.device_builder(build, feed["x"])
            told = feed.pop("steps_per_epoch")
            runner = Runner(
                None if setup == base else setup,
                build,
                feed,
                steps=told,
                examples_per_step=step,
                seed=self._settings.seed,
                clock=self._clock,
                warm_data=warm,
                batch_size=base.batch_size,
                callbacks=self._settings.callbacks,
            )
            runner.start()  # a whole (or shortened) epoch: the timed epochs' warm-up
            return WholeRuns(runner, plan.examples)

        plan = epoch_plan(self._data, base.batch_size, base_step, epoch, most, multiple)
        work = plan.work(bool(self._settings.callbacks))
        rounds = self._settings.confirm_rounds
        return confirm(start, base, candidates, rounds=rounds, clock=self._clock, work=work)

    def _pipeline_knob(self) -> None:
        fraction = None
        x, y = self._data.first_batch()
        held = {"x": x, "y": y}
        probe = self._try(
            self._base_setup,
            same_arithmetic=False,
            label="compute only (one batch from memory)",
            feed=_repeat_batch(held, self._timed_steps),
            probe=True,
        )
        if probe is not None and probe.ratio is not None:
            fraction = _pipeline.probe_fraction(probe.ratio)
        if self._data.kind == PY_DATASET:  # its input is the user's Python code: say, not rebuild
            self._notes.append(_pipeline.py_dataset_note(self._data.value, fraction))
            return
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
        if bound:  # the input is the limit: a CPU augmentation may move to the step
            self._device_augmentation_knob()

    def _device_augmentation_knob(self) -> None:
        dataset, why_not = _device_augmentation.device_dataset(self._data, self._best[0].batch_size)
        if dataset is None:
            if why_not:
                self._notes.append(f"augmentation in the training step not tried: {why_not}")
            return
        self._notes.append(
            "augmentation in the training step tried: the pipeline's augment_fn per batch in "
            "DeviceAugmented (a new random stream: loss checked at loss_tolerance)"
        )
        self._try(self._best[0].with_(augment_on_device=True), same_arithmetic=False)

    def _steps_per_execution_line(self, jit: bool, first: int) -> None:
        current = self._best[0]
        bound = min(self._settings.max_steps_per_execution, self._steps)
        spe = self._base_setup.steps_per_execution * first
        line_best = self._best[1].ratio if jit == current.jit_compile and self._best[1] else 1.0
        misses = 0
        epoch = self._settings.epoch_steps
        while spe <= bound and misses < _PATIENCE:
            if not divides(spe, epoch):
                note = (
                    f"steps_per_execution={spe} and above not tried: they do not divide the epoch"
                )
                if note not in self._notes:
                    self._notes.append(note + f" ({epoch} steps)")
                return
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
        if chosen.augment_on_device:
            notes.append(
                'build the pipeline with augment_on="device" and fit '
                "tfthroughput.data.DeviceAugmented(model, dataset); save the model itself"
            )
        spe = chosen.steps_per_execution
        if spe != self._base_setup.steps_per_execution and spe > 1:
            notes.append(
                f"Keras runs whole executions: with steps_per_execution={spe}, keep fit's "
                f"steps_per_epoch a multiple of {spe} (fit trains steps_per_epoch rounded up to a "
                "multiple of it); GPUMonitor warns when it is not"
            )
        return notes
