"""Inference's workload for the search (``engine.search``): a trial is a fresh model called by
``predict``, one timed piece of work is the timed part of a ``predict`` call with the
baseline's examples (``predict_runner``), and its math is checked by its outputs
(``output_check``): against the baseline's, or, where it only adds ``steps_per_execution``
to the best setup so far, exactly against that setup's. Before each round both runners take a
few single-batch latency samples; a trial over ``max_batch_latency_ms`` is not chosen.

The knobs, in order (:func:`inference_knobs`; why each: ``docs/tuning.md``, "Inference"): the
batch line, XLA flipped, the ``steps_per_execution`` line, the policy. A trial joins the best
setup only by beating it by the noise floor, so a knob that gains nothing measurable is not
added. The confirmation's piece of work is a whole ``predict`` call on the data as given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import keras

from tfthroughput.tuning.engine.confirmation import Confirmation, ConfirmationPlan, WholeRuns
from tfthroughput.tuning.engine.contract import (
    Knob,
    Mode,
    Proposal,
    SearchSettings,
    SearchView,
    Workload,
)
from tfthroughput.tuning.engine.measure import MIN_NOISE
from tfthroughput.tuning.engine.search import lengthen
from tfthroughput.tuning.engine.verdict import (
    FAILED,
    OUTPUTS_DIFFER,
    OVER_LATENCY,
    measured,
    speed_status,
)
from tfthroughput.tuning.inference.data import InferenceData
from tfthroughput.tuning.inference.output_check import EXACT_OUTPUT_TOLERANCE, compare_outputs
from tfthroughput.tuning.inference.predict_runner import PredictRunner
from tfthroughput.tuning.knobs.batch import batch_knob
from tfthroughput.tuning.knobs.steps_per_execution import steps_per_execution_line
from tfthroughput.tuning.knobs.xla_and_policy import policy_knob, xla_knob
from tfthroughput.tuning.result import InferenceTrial, InferenceTuneResult
from tfthroughput.tuning.setup import TuneSetup

# Shortest timed part of the baseline's run: longer than training's 0.1 s, because a compute-
# bound predict reaches 0.1 s in 2-3 batches, and a few batches measure a shared machine's
# bursts more than the knob (longer runs average more of them; they do not remove them).
_MIN_RUN_SECONDS = 0.25
# Fewest batches in a timed run (its first execution is not timed), and so the fewest a large
# batch gets; arrays are repeated to fill a run, so this times the data's memory at most.
_MIN_BATCHES = 4
# Executions of the warm-up predict: tracing (and XLA compilation) happen in the first; the
# timed runs skip their own first execution too.
_WARMUP_EXECUTIONS = 2
_MOST_BATCH_FACTOR = 128  # the largest batch tried, times the given one
# What ends a line of predict setups: a failure, outputs off the baseline's, a batch too slow.
_LINE_ENDS = frozenset({FAILED, OUTPUTS_DIFFER, OVER_LATENCY})


@dataclass(frozen=True, kw_only=True)
class InferenceSettings(SearchSettings):
    """The inference search's settings (its confirmation: whole predict calls)."""

    output_tolerance: float
    max_batch_latency_ms: float | None


def inference_knobs() -> tuple[Knob, ...]:
    """The knobs the inference search tries, in order (each skips itself where its settings
    say so)."""
    return (batch_knob, xla_knob, steps_per_execution_line, policy_knob)


class InferenceWorkload(Workload):
    """Trials of ``predict`` on the user's inputs (the engine's ``Workload``).

    ``runner`` makes each trial's runner (:class:`PredictRunner`'s signature); tests give one
    with known costs.

    Attributes:
        examples_per_run: Examples in the baseline's timed run, once lengthened.
    """

    trial_type = InferenceTrial
    cannot_run = "`predict` fails on the model as given"
    # A knob joins the best setup only when it beats it by the noise floor: one that gains
    # nothing measurable (steps_per_execution on large batches, say) is left out.
    best_margin = MIN_NOISE

    def __init__(
        self,
        build_model: Callable[[], keras.Model],
        data: InferenceData,
        settings: InferenceSettings,
        clock: Callable[[], float],
        runner: Callable[..., PredictRunner] = PredictRunner,
    ) -> None:
        self.build_model, self.data, self.settings, self.clock = build_model, data, settings, clock
        self.knobs = inference_knobs()
        self._runner = runner
        self.examples_per_run = 0

    def baseline(self) -> PredictRunner:
        steps = self.settings.steps
        runner = self.runner(None, steps=steps, warmup_steps=_WARMUP_EXECUTIONS)
        runner.start(user_model_errors=True)
        fewest = max(_MIN_BATCHES, 2 * runner.setup.steps_per_execution)
        if runner.steps < fewest:
            runner.set_steps(fewest)
        lengthen(runner, runner.set_steps, min_seconds=_MIN_RUN_SECONDS, steps=steps)
        self.examples_per_run = runner.steps * runner.examples_per_step

        def baseline_p95_ms() -> float | None:
            runner.before_round()
            return runner.latency_ms(0.95)

        self.mode = Mode(
            data=self.data,
            line_ends=_LINE_ENDS,
            most_batch_factor=_MOST_BATCH_FACTOR,
            steps_per_execution_bound=lambda setup: self._steps_per_execution_bound(setup, runner),
            latency_limit_ms=self.settings.max_batch_latency_ms,
            baseline_p95_ms=baseline_p95_ms,
        )
        return runner

    def timed_batches(self, base: PredictRunner, setup: TuneSetup) -> int:
        """Batches per timed run: the baseline's examples per run, at ``setup``'s batch."""
        if setup.batch_size is None or base.setup.batch_size is None:
            return base.steps
        return max(1, self.examples_per_run // setup.batch_size)

    def candidate(self, view: SearchView, proposal: Proposal) -> PredictRunner:
        # The first execution of a run is not timed: the timed part after it has the
        # baseline's examples, and at least two whole executions of its own.
        setup = proposal.setup
        spe = setup.steps_per_execution
        timed = max(self.timed_batches(view.base_runner, setup), 2 * spe, _MIN_BATCHES)
        batches = spe + -(-timed // spe) * spe
        return self.runner(setup, steps=batches, warmup_steps=_WARMUP_EXECUTIONS * spe)

    def judge(
        self, view: SearchView, proposal: Proposal, runner: PredictRunner, comparison: Any
    ) -> InferenceTrial:
        """The trial: its outputs checked, its p95 latency against the limit."""
        setup, parent = proposal.setup, view.best.setup
        if setup.with_(steps_per_execution=parent.steps_per_execution) == parent:
            # Only steps_per_execution added: the setup it was added to must be matched exactly.
            check = compare_outputs(
                view.best.reference,
                runner.outputs,
                same_arithmetic=True,
                tolerance=EXACT_OUTPUT_TOLERANCE,
            )
        else:
            arithmetic = lambda s: (s.batch_size, s.jit_compile, s.policy)  # noqa: E731
            same = arithmetic(setup) == arithmetic(view.base)
            check = compare_outputs(
                view.base_runner.outputs,
                runner.outputs,
                same_arithmetic=same,
                tolerance=EXACT_OUTPUT_TOLERANCE if same else self.settings.output_tolerance,
            )
        p95 = runner.latency_ms(0.95)
        limit = self.settings.max_batch_latency_ms
        if not check.passed:
            status = OUTPUTS_DIFFER
        elif limit is not None and p95 is not None and p95 > limit:
            status = OVER_LATENCY
        else:
            status = speed_status(comparison)
        return InferenceTrial(
            setup,
            proposal.label,
            status,
            **measured(comparison),
            **runner.figures(),
            output_check=check,
        )

    def confirmation(self, view: SearchView, candidates: list, most: float) -> ConfirmationPlan:
        """The pick against a rebuilt baseline by whole ``predict`` calls on the data as given
        (``engine.confirmation``)."""
        base = view.base
        size = base.batch_size or 1
        most = most // size * size  # whole batches of the given size: the same examples each
        counted: list[int] = []

        def runner_for(setup: TuneSetup) -> WholeRuns:
            spe = setup.steps_per_execution
            given = None if setup == base else setup
            runner = self.runner(given, steps=2 * spe, warmup_steps=_WARMUP_EXECUTIONS * spe)
            feed: dict = {}

            def start() -> None:
                runner.start()
                feed.update(self.data.whole_feed(runner.setup.batch_size, most)[0])
                _, calls.examples_per_step = runner.whole_call(feed)  # the timed calls' warm-up
                counted.append(calls.examples_per_step)

            calls = WholeRuns(runner, 0, run=lambda: runner.whole_call(feed)[0], start=start)
            return calls

        whole = self.data.whole_feed(base.batch_size, most)[1]

        def finish(confirmation: Confirmation) -> Confirmation:
            # Each side calls predict at its own batch size, so the work names the examples.
            examples = f"{counted[0]:,} examples" if counted else "the data"
            total = "the data" if self.data.examples is None else f"{self.data.examples:,}"
            work = (
                f"whole predict calls on the data as given ({examples}, set-up included)"
                if whole
                else f"predict calls on the first {examples} of {total} (set-up included)"
            )
            return replace(confirmation, work=work)

        return ConfirmationPlan(runner_for, "predict calls", finish)

    def result(self, **fields: Any) -> InferenceTuneResult:
        baseline, chosen = fields["baseline"], fields["chosen"]
        notes = []
        if chosen.batch_size != baseline.batch_size:
            notes.append(
                f"predict with batch_size={chosen.batch_size} (from "
                f"{baseline.batch_size}): each batch waits for more examples, so a "
                "server that batches requests adds that wait to their latency"
            )
        if chosen.policy != baseline.policy:
            notes.append(f"build the model under mixed_precision({chosen.policy!r})")
        fields["notes"] += tuple(notes)
        limit = self.settings.max_batch_latency_ms
        return InferenceTuneResult(**fields, max_batch_latency_ms=limit)

    def runner(self, setup: TuneSetup | None, *, steps: int, warmup_steps: int) -> Any:
        """A runner for ``setup`` (``None``: the model as given) with this search's seed."""
        return self._runner(
            setup,
            self.build_model,
            self.data,
            steps=steps,
            warmup_steps=warmup_steps,
            seed=self.settings.seed,
            clock=self.clock,
        )

    def _steps_per_execution_bound(self, setup: TuneSetup, base: PredictRunner) -> tuple[int, str]:
        """Up to the smallest power of two that runs one ``predict`` call on the arrays in one
        execution (a call of 5 batches: 8): the user's call is what it groups, and a value
        past that call's batches changes nothing in it. For a dataset of unknown size, up to
        half the batches of the search's timed run."""
        examples, size = self.data.examples, setup.batch_size
        if examples is None or size is None:
            return max(1, self.timed_batches(base, setup) // 2), ""
        batches = -(-examples // size)
        given = base.setup.steps_per_execution
        why = (
            f"steps_per_execution above {given} not tried: one predict call on the "
            f"{examples} examples is {batches} batch{'es' if batches > 1 else ''} of {size}"
        )
        return 1 << (batches - 1).bit_length(), why
