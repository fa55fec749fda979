"""Training's workload for the search (``engine.search``): a trial is a fresh model trained by
``fit``, one timed piece of work is ``steps`` steps of its compiled train function, and its
math is checked by its warm-up loss against the baseline's (``replay``, ``loss_check``).

The baseline's timed run is doubled until it lasts 0.1 s (at most 64 times its warm-up); a
larger batch runs proportionally fewer steps, so every trial times about the baseline's
examples. The knobs, in order (:func:`training_knobs`; why each and why in that order:
``docs/tuning.md``, "What it tries, in order"): the pipeline where the input is the limit, the
``steps_per_execution`` line, XLA flipped around its best, the policy (and the line once more
on it), larger batches where allowed, the pipeline on the best setup (and the line once more
on it). The confirmation's piece of work is a whole ``fit`` epoch (``whole_epochs``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import keras

from tfthroughput._validation import leading_dimension
from tfthroughput.tuning.engine.confirmation import ConfirmationPlan
from tfthroughput.tuning.engine.contract import (
    Knob,
    Mode,
    Proposal,
    SearchSettings,
    SearchView,
    Workload,
)
from tfthroughput.tuning.engine.search import lengthen
from tfthroughput.tuning.engine.trial_model import trial_failures
from tfthroughput.tuning.engine.verdict import FAILED, PROBE, REJECTED, measured, speed_status
from tfthroughput.tuning.knobs.batch import batch_knob
from tfthroughput.tuning.knobs.pipeline import pipeline_knob, pipeline_on_best_knob
from tfthroughput.tuning.knobs.steps_per_execution import (
    line_again_on_a_new_best,
    steps_per_execution_line,
    xla_around_the_best,
)
from tfthroughput.tuning.knobs.xla_and_policy import policy_knob
from tfthroughput.tuning.result import TuneResult, TuneTrial
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training import pipeline as rebuilding
from tfthroughput.tuning.training import replay
from tfthroughput.tuning.training.data import TrainingData
from tfthroughput.tuning.training.fit_runner import FitRunner
from tfthroughput.tuning.training.whole_epochs import epoch_work

# Shortest timed run of the baseline: shorter runs measure the scheduler more than the steps
# (docs/tuning.md, "Why the search is shaped so").
_MIN_RUN_SECONDS = 0.1
_MOST_BATCH_FACTOR = 4  # batches 2x and 4x the given one


@dataclass(frozen=True, kw_only=True)
class TrainingSettings(SearchSettings):
    """The training search's settings (its confirmation: whole epochs)."""

    loss_tolerance: float
    try_pipeline: bool
    allow_batch_change: bool
    epoch_steps: int | None = None  # the user's epoch: steps_per_execution must divide it
    callbacks: tuple = ()  # the user's, run in the confirmation's epochs


def training_knobs(settings: TrainingSettings) -> tuple[Knob, ...]:
    """The knobs the training search tries, in order, as its settings allow."""
    knobs: list[Knob] = [pipeline_knob] if settings.try_pipeline else []
    knobs += [steps_per_execution_line, xla_around_the_best, line_again_on_a_new_best(policy_knob)]
    if settings.allow_batch_change:
        knobs.append(batch_knob)
    if settings.try_pipeline:
        knobs.append(line_again_on_a_new_best(pipeline_on_best_knob))
    return tuple(knobs)


def same_arithmetic_as(base: TuneSetup, setup: TuneSetup) -> bool:
    """Whether ``setup`` trains with the baseline's arithmetic, so its loss must match exactly:
    the same XLA setting, policy, batch and random stream (the pipeline and
    ``steps_per_execution`` change none of them)."""
    arithmetic = lambda s: (s.jit_compile, s.policy, s.batch_size, s.augment_on_device)  # noqa: E731
    return arithmetic(setup) == arithmetic(base)


class TrainingWorkload(Workload):
    """Trials of ``fit`` on the user's data (the engine's ``Workload``).

    Attributes:
        steps: Steps of every warm-up (the baseline's, rounded up to whole executions).
        timed_steps: Steps of the baseline's timed run, once lengthened.
        plan: The rebuilt input pipeline's plan, once a knob asked for it.
        replay: The baseline's warm-up batches as ``fit`` arguments, replayed to every trial
            that reads the input as given (``replay``); ``None`` where it cannot be replayed.
    """

    trial_type = TuneTrial
    cannot_run = "The model as given cannot be trained"
    best_margin = 0.0  # any faster trial with a higher median ratio becomes the best

    def __init__(
        self,
        build_model: Callable[[], keras.Model],
        data: TrainingData,
        settings: TrainingSettings,
        clock: Callable[[], float],
    ) -> None:
        self.build_model, self.data, self.settings, self.clock = build_model, data, settings, clock
        self.knobs = training_knobs(settings)
        self.steps = self.timed_steps = settings.steps
        self.plan: rebuilding.PipelinePlan | None = None
        self.replay: dict | None = None
        self.measured_tolerance: replay.Variation | None = None  # replay.measured_tolerance, once
        self.shuffled_tolerance: replay.Variation | None = None  # arrays shuffled as fit does

    def baseline(self) -> FitRunner:
        probe = self.build_model()
        given = probe if isinstance(probe, keras.Model) else None
        first_spe = int(getattr(given, "steps_per_execution", 1) or 1)
        del probe, given
        steps = first_spe
        while steps < self.settings.steps:
            steps *= 2
        self.steps = steps
        self.replay, why_not = replay.replay_feed(self.data, self.data.batch_size, steps)
        feed = self.data.feed(self.data.batch_size, steps)
        runner = self.runner(None, self.build_model, feed, steps=steps, check_feed=self.replay)
        runner.start(user_model_errors=True)
        if self.replay is None:
            runner.notes.append(f"loss checked on each trial's own pass of the input: {why_not}")

        def set_steps(timed: int) -> None:  # the warm-up (and so the loss check) keeps steps
            runner.set_steps(timed, self.data.feed(self.data.batch_size, timed))

        lengthen(runner, set_steps, min_seconds=_MIN_RUN_SECONDS, steps=steps)
        self.timed_steps = runner.steps
        self.mode = Mode(
            data=self.data,
            line_ends=frozenset({FAILED}),
            most_batch_factor=_MOST_BATCH_FACTOR,
            steps_per_execution_bound=lambda setup: (self.steps, ""),
            epoch_steps=self.settings.epoch_steps,
            pipeline_plan=self.pipeline_plan,
        )
        return runner

    def pipeline_plan(self) -> rebuilding.PipelinePlan:
        """The rebuilt pipeline's plan, made once; raises on an input it cannot read."""
        if self.plan is None:
            self.plan = rebuilding.plan(self.data)
        return self.plan

    def candidate(self, view: SearchView, proposal: Proposal) -> FitRunner:
        """A runner for the proposal; the compute-only probe is the baseline's own model on
        one batch held in memory, not a model of its own."""
        setup, base = proposal.setup, view.base
        warmup, steps = self.steps, self.timed_steps
        if proposal.probe:
            x, y = self.data.first_batch()
            feed = rebuilding.repeat_batch({"x": x, "y": y}, steps)
            return view.base_runner.fed_otherwise(feed, steps=steps)
        if setup.batch_size and base.batch_size and setup.batch_size > base.batch_size:
            factor = setup.batch_size // base.batch_size
            warmup = max(setup.steps_per_execution, warmup // factor)
            steps = max(setup.steps_per_execution, steps // factor)
        feed, warm = self._feed(setup, steps)
        build = self.build_model
        if setup.augment_on_device:
            build = rebuilding.device_builder(self.build_model, feed["x"])
        return self.runner(
            setup,
            build,
            feed,
            steps=steps,
            warm_data=warm,
            warmup_steps=warmup,
            check_feed=replay.replayed_for(self, setup),
        )

    def judge(
        self, view: SearchView, proposal: Proposal, runner: FitRunner, comparison: Any
    ) -> Generator[FitRunner, bool, TuneTrial]:
        """The trial: a probe is never judged; else its warm-up loss against the baseline's
        (exactly where the arithmetic is the same: :func:`same_arithmetic_as`). A generator:
        the loss check may ask for passes of the input (``replay.loss_check``)."""
        setup, check = proposal.setup, None
        if proposal.probe:
            status = PROBE
        else:
            same = same_arithmetic_as(view.base, setup)
            check = yield from replay.loss_check(self, view, setup, runner, same)
            status = speed_status(comparison) if check.passed else REJECTED
        figures = runner.figures()
        if setup.batch_size != view.base.batch_size:
            figures["reason"] = "; ".join(
                [*runner.notes, "learning dynamics change (fewer, larger steps per epoch)"]
            )
        return TuneTrial(
            setup, proposal.label, status, **measured(comparison), **figures, loss_check=check
        )

    def confirmation(self, view: SearchView, candidates: list, most: float) -> ConfirmationPlan:
        """The pick against a rebuilt baseline by whole ``fit`` epochs of the user's data."""
        return ConfirmationPlan(*epoch_work(self, view.base, candidates, most))

    def examples_per_step(self, batch_size: int | None) -> int:
        if batch_size is not None:
            return batch_size
        return self._first_batch_examples

    @functools.cached_property
    def _first_batch_examples(self) -> int:
        x, _ = self.data.first_batch()
        return leading_dimension(x)

    def result(self, **fields: Any) -> TuneResult:
        chosen = fields["chosen"]
        fields["notes"] += tuple(_chosen_notes(fields["baseline"], chosen))
        pipeline = dict(self.plan.build_pipeline_kwargs) if chosen.pipeline and self.plan else None
        return TuneResult(**fields, pipeline_kwargs=pipeline)

    def runner(
        self, setup: TuneSetup | None, build: Callable, feed: dict, *, steps: int | None, **how
    ) -> FitRunner:
        """A :class:`FitRunner` for ``setup`` (``None``: the model as given, at the data's batch
        size) with this search's seed, clock and examples per step; ``how``: its other
        arguments (``warm_data``, ``warmup_steps``, ``callbacks``, ``check_feed``: the replayed
        batches its warm-up runs on)."""
        size = self.data.batch_size if setup is None else setup.batch_size
        return FitRunner(
            setup,
            build,
            feed,
            steps=steps,
            examples_per_step=self.examples_per_step(size),
            seed=self.settings.seed,
            clock=self.clock,
            batch_size=self.data.batch_size,  # read only for the model as given
            **how,
        )

    def _feed(self, setup: TuneSetup, steps: int) -> tuple[dict, Callable[[], None] | None]:
        if setup.augment_on_device:
            dataset, _ = rebuilding.device_dataset(self.data, setup.batch_size)
            return {"x": dataset, "shuffle": False}, None
        if not setup.pipeline:
            return self.data.feed(setup.batch_size, steps), None
        with trial_failures("train"):  # an input the rebuild cannot take: one line
            dataset = rebuilding.rebuilt(self.data, self.pipeline_plan(), setup.batch_size)
        batches = self.data.epoch_batches
        if batches is not None and setup.batch_size and self.data.batch_size:
            batches = -(-batches * self.data.batch_size // setup.batch_size)
        cached = self.plan.build_pipeline_kwargs["cache"]
        warm = (lambda: rebuilding.fill_cache(dataset, batches)) if cached else None
        return {"x": dataset, "shuffle": False}, warm


def _chosen_notes(baseline: TuneSetup, chosen: TuneSetup) -> list[str]:
    """What the chosen setup changes for the user, as sentences."""
    notes = []
    if chosen.batch_size != baseline.batch_size:
        notes.append(
            f"the chosen batch size ({chosen.batch_size}, from {baseline.batch_size}) "
            "changes the learning dynamics: fewer optimizer steps per epoch; retune the "
            "learning rate. Gradient accumulation (with_gradient_accumulation) can only make "
            "the effective batch larger, not keep the smaller one"
        )
    if chosen.policy != baseline.policy:
        notes.append(f"build the model under mixed_precision({chosen.policy!r})")
    if chosen.augment_on_device:
        notes.append(
            'build the pipeline with augment_on="device" and fit '
            "tfthroughput.data.DeviceAugmented(model, dataset); save the model itself"
        )
    spe = chosen.steps_per_execution
    if spe != baseline.steps_per_execution and spe > 1:
        notes.append(
            f"Keras runs whole executions: with steps_per_execution={spe}, keep fit's "
            f"steps_per_epoch a multiple of {spe} (fit trains steps_per_epoch rounded up to a "
            "multiple of it); GPUMonitor warns when it is not"
        )
    return notes
