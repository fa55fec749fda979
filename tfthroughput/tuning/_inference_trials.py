"""One inference trial at a time: a fresh predict runner, measured against the baseline, judged.

:class:`InferenceTrials` holds the baseline's runner, every trial so far, the best setup and
its outputs, and the time budget (a trial is skipped when the time left is less than 1.25
times the cost of the dearest of the last three). The order of the knobs is
:mod:`tfthroughput.tuning._inference_search`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import keras

from tfthroughput.tuning._inference_data import InferenceData
from tfthroughput.tuning._measure import MIN_NOISE, GPUWindows, compare
from tfthroughput.tuning._predict_runner import PredictRunner
from tfthroughput.tuning._runner import TrialFailed
from tfthroughput.tuning._status import (
    FAILED,
    FASTER,
    OUTPUTS_DIFFER,
    OVER_LATENCY,
)
from tfthroughput.tuning._trial_loop import TrialLoop
from tfthroughput.tuning._trial_verdict import as_given, measured, speed_status
from tfthroughput.tuning.inference_result import InferenceTrial
from tfthroughput.tuning.output_check import EXACT_OUTPUT_TOLERANCE, compare_outputs
from tfthroughput.tuning.setup import TuneSetup

LATENCY_SAMPLES = 5  # single-batch calls per runner per round
# Shortest timed part of the baseline's run: longer than training's 0.1 s, because a compute-
# bound predict reaches 0.1 s in 2-3 batches, and a few batches measure a shared machine's
# bursts more than the knob (longer runs average more of them; they do not remove them).
_MIN_RUN_SECONDS = 0.25
_MAX_LENGTHENING = 64
# Fewest batches in a timed run (its first execution is not timed), and so the fewest a large
# batch gets; arrays are repeated to fill a run, so this times the data's memory at most.
_MIN_BATCHES = 4
# Executions of the warm-up predict: tracing (and XLA compilation) happen in the first; the
# timed runs skip their own first execution too.
_WARMUP_EXECUTIONS = 2


@dataclass(frozen=True)
class InferenceSettings:
    steps: int
    rounds: int
    time_budget: float
    output_tolerance: float
    seed: int
    max_steps_per_execution: int
    max_batch_latency_ms: float | None
    policy: str | None  # the recommended policy to try, or None
    try_xla: bool
    notes: tuple[str, ...]
    confirm_rounds: int = 0  # rounds of the confirmation by whole predict calls (0: none)


class InferenceTrials(TrialLoop):
    """The baseline, and one trial at a time against it, within the time budget.

    ``runner`` makes each trial's runner (:class:`PredictRunner`'s signature); tests give
    one with known costs.
    """

    def __init__(
        self,
        build_model: Callable[[], keras.Model],
        data: InferenceData,
        settings: InferenceSettings,
        clock: Callable[[], float],
        gpu: GPUWindows,
        runner: Callable[..., PredictRunner] = PredictRunner,
    ) -> None:
        super().__init__(build_model, data, settings, clock, gpu)
        self._runner = runner
        self._best_outputs = None

    def _measure_baseline(self) -> None:
        start = self._clock()
        steps = self._settings.steps
        runner = self._runner(
            None,
            self._build_model,
            self._data,
            steps=steps,
            warmup_steps=_WARMUP_EXECUTIONS,
            seed=self._settings.seed,
            clock=self._clock,
        )
        try:
            runner.start(user_model_errors=True)
            fewest = max(_MIN_BATCHES, 2 * runner.setup.steps_per_execution)
            if runner.steps < fewest:
                runner.set_steps(fewest)
            seconds = runner.run()
            while seconds < _MIN_RUN_SECONDS and runner.steps < steps * _MAX_LENGTHENING:
                runner.set_steps(runner.steps * 2)
                seconds = runner.run()
        except TrialFailed as error:
            raise RuntimeError(
                f"`predict` fails on the model as given, so there is nothing to tune: {error}"
            ) from error
        # Its own speed, shown if no candidate runs; the rounds' median replaces it.
        self._first_speed = runner.steps * runner.examples_per_step / max(seconds, 1e-9)
        self._base, self._base_setup = runner, runner.setup
        self._examples_per_run = runner.steps * runner.examples_per_step
        self._best = (runner.setup, None)
        self._best_outputs = runner.outputs
        self._costs.append(self._clock() - start)
        self._trials.append(InferenceTrial(**as_given(runner)))

    def _timed_batches(self, setup: TuneSetup) -> int:
        """Batches per timed run: the baseline's examples per run, at ``setup``'s batch."""
        if setup.batch_size is None or self._base_setup.batch_size is None:
            return self._base.steps
        return max(1, self._examples_per_run // setup.batch_size)

    def _try(self, setup: TuneSetup) -> InferenceTrial | None:
        if self._out_of_time():
            return None
        start = self._clock()
        # The first execution of a run is not timed: the timed part after it has the
        # baseline's examples, and at least two whole executions of its own.
        spe = setup.steps_per_execution
        timed = max(self._timed_batches(setup), 2 * spe, _MIN_BATCHES)
        batches = spe + -(-timed // spe) * spe
        runner = self._runner(
            setup,
            self._build_model,
            self._data,
            steps=batches,
            warmup_steps=_WARMUP_EXECUTIONS * setup.steps_per_execution,
            seed=self._settings.seed,
            clock=self._clock,
        )
        label = setup.changes_from(self._base_setup)

        def sample_latencies() -> None:
            self._base.sample_latency(LATENCY_SAMPLES)
            runner.sample_latency(LATENCY_SAMPLES)

        outputs = None
        try:
            runner.start()
            outputs = runner.outputs
            comparison = compare(
                self._base, runner, self._settings.rounds, self._gpu, before_round=sample_latencies
            )
        except TrialFailed as error:
            trial = InferenceTrial(setup, label, FAILED, reason=str(error))
            comparison = None
        else:
            trial = self._judge(setup, label, runner, comparison)
            self._baseline_speeds += comparison.baseline_speeds
        finally:
            runner.close()
        self._costs.append(self._clock() - start)
        self._trials.append(trial)
        # A knob joins the best setup only when it beats it by the noise floor: one that gains
        # nothing measurable (steps_per_execution on large batches, say) is left out.
        best_ratio = 1.0 if self._best[1] is None else self._best[1].ratio
        if trial.status == FASTER and comparison.ratio > best_ratio * (1.0 + MIN_NOISE):
            self._best, self._best_outputs = (setup, comparison), outputs
        return trial

    def _judge(self, setup, label, runner, comparison) -> InferenceTrial:
        parent = self._best[0]
        if setup.with_(steps_per_execution=parent.steps_per_execution) == parent:
            # Only steps_per_execution added: the setup it was added to must be matched exactly.
            check = compare_outputs(
                self._best_outputs,
                runner.outputs,
                same_arithmetic=True,
                tolerance=EXACT_OUTPUT_TOLERANCE,
            )
        else:
            base = self._base_setup
            same = (setup.batch_size, setup.jit_compile, setup.policy) == (
                base.batch_size,
                base.jit_compile,
                base.policy,
            )
            check = compare_outputs(
                self._base.outputs,
                runner.outputs,
                same_arithmetic=same,
                tolerance=EXACT_OUTPUT_TOLERANCE if same else self._settings.output_tolerance,
            )
        p95 = runner.latency_ms(0.95)
        limit = self._settings.max_batch_latency_ms
        if not check.passed:
            status = OUTPUTS_DIFFER
        elif limit is not None and p95 is not None and p95 > limit:
            status = OVER_LATENCY
        else:
            status = speed_status(comparison)
        return InferenceTrial(
            setup,
            label,
            status,
            **measured(comparison),
            latency_p50_ms=runner.latency_ms(0.5),
            latency_p95_ms=p95,
            warmup_seconds=runner.warmup_seconds,
            memory_mib=runner.memory_mib,
            output_check=check,
            reason="; ".join(runner.notes),
        )
