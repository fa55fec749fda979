"""Training's piece of work for the confirmation: one ``fit`` epoch of the user's data, fed as
the user feeds it (arrays shuffled as ``fit`` does by default, a dataset as given, the rebuilt
pipeline where chosen), with the user's ``steps_per_epoch`` or to the data's end, callbacks
included.

A whole epoch is timed as the second epoch of a two-epoch ``fit``, as it runs inside the
user's own ``fit`` (the first starts the input's iterator and prefetching, once per ``fit``),
where two of them per round fit the confirmation's share of the search's time; an epoch longer
than that is timed over its first steps in a one-epoch ``fit`` (a multiple of every
``steps_per_execution`` confirmed, so Keras runs whole executions; a second epoch could run
past the data's end), and the work's description says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfthroughput.tuning.engine.confirmation import WholeRuns
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training import pipeline as rebuilding
from tfthroughput.tuning.training.data import TrainingData


@dataclass(frozen=True)
class EpochPlan:
    """One timed epoch at one batch size.

    Attributes:
        steps: Steps in the timed epoch.
        whole: Whether that is the user's whole epoch.
        length: Steps in the user's epoch; ``None`` where the data does not end.
        examples: Examples in the timed epoch.
    """

    steps: int
    whole: bool
    length: int | None
    examples: int

    def work(self, callbacks: bool) -> str:
        """The timed work, as the table names it."""
        hooks = ", callbacks included" if callbacks else ""
        if self.whole:
            return f"whole fit epochs ({self.steps} steps{hooks})"
        if self.length is None:
            return f"fit epochs of {self.steps} steps (the data's end is not known{hooks})"
        return f"the first {self.steps} of each fit epoch's {self.length} steps{hooks}"


def epoch_length(data: TrainingData, batch_size: int | None, steps_per_epoch: int | None):
    """Steps in one of the user's epochs at ``batch_size``: ``steps_per_epoch`` where given,
    else the data's batches (``None`` where the data does not end or its length is unknown)."""
    return steps_per_epoch if steps_per_epoch is not None else data.epoch_length(batch_size)


def epoch_plan(
    data: TrainingData,
    batch_size: int | None,
    examples_per_step: int,
    steps_per_epoch: int | None,
    max_examples: float,
    multiple: int,
) -> EpochPlan:
    """The epoch to time at ``batch_size``: whole where it holds at most ``max_examples``
    examples, else its first steps (a multiple of ``multiple``)."""
    length = epoch_length(data, batch_size, steps_per_epoch)
    cap = max(multiple, int(max_examples // examples_per_step) // multiple * multiple)
    whole = length is not None and length <= cap
    steps = length if whole else cap
    examples = steps * examples_per_step
    if data.examples is not None:  # the last batch of an epoch to the arrays' end may be partial
        examples = min(examples, data.examples)
    return EpochPlan(steps, whole, length, examples)


def epoch_feed(
    data: TrainingData,
    setup: TuneSetup,
    plan: EpochPlan,
    pipeline: rebuilding.PipelinePlan | None,
    steps_per_epoch: int | None,
) -> tuple[dict[str, Any], Any]:
    """``fit`` arguments of one timed epoch for ``setup`` (its ``steps_per_epoch`` included),
    and the cache filler of a rebuilt pipeline (or ``None``)."""
    size, warm = setup.batch_size, None
    if setup.augment_on_device or setup.pipeline:  # rebuilt: repeating, so the epoch is told
        if setup.augment_on_device:
            dataset, _ = rebuilding.device_dataset(data, size)
        else:
            dataset = rebuilding.rebuilt(data, pipeline, size)
            if pipeline.build_pipeline_kwargs["cache"]:
                warm = lambda: rebuilding.fill_cache(dataset, plan.length)  # noqa: E731
        return {"x": dataset, "steps_per_epoch": plan.steps, "shuffle": False}, warm
    # As the user feeds it; the epoch is told where the user tells it or it is shortened.
    told = plan.steps if (steps_per_epoch is not None or not plan.whole) else None
    # A length tf.data cannot tell (a generator): never run out.
    feed = data.epoch_feed(size, endless=plan.length is None)
    return {**feed, "steps_per_epoch": told}, warm


def epoch_work(
    workload: Any, base: TuneSetup, candidates: list[tuple[TuneSetup, str]], most: float
) -> tuple[Callable[[TuneSetup], WholeRuns], str]:
    """The confirmation's piece of work by whole ``fit`` epochs of the user's data
    (``tuning/engine/confirmation.py``), each epoch at most ``most`` examples: a setup's
    runner (made, not started: the confirmation starts it), and the work's description.

    Args:
        workload: Training's workload (``training.workload``): its data, settings, pipeline
            plan and runners.
        base: The setup as given.
        candidates: ``(setup, label)`` pairs to confirm, best first.
        most: The most examples one timed run may hold (a whole epoch is timed in a fit of
            two, so it holds at most half).
    """
    data, settings, epoch = workload.data, workload.settings, workload.settings.epoch_steps
    multiple = max(s.steps_per_execution for s, _ in [(base, ""), *candidates])

    def timed_plan(batch_size: int | None) -> EpochPlan:
        step = workload.examples_per_step(batch_size)
        plan = epoch_plan(data, batch_size, step, epoch, most / 2, multiple)
        return plan if plan.whole else epoch_plan(data, batch_size, step, epoch, most, multiple)

    def runner_for(setup: TuneSetup) -> WholeRuns:
        plan = timed_plan(setup.batch_size)
        feed, warm = epoch_feed(data, setup, plan, workload.plan, epoch)
        build = workload.build_model
        if setup.augment_on_device:
            build = rebuilding.device_builder(build, feed["x"])
        told = feed.pop("steps_per_epoch")
        given = None if setup == base else setup
        # A two-epoch fit's first epoch warms the timed one: the start only traces (one
        # execution); a shortened epoch, timed in a fit of its own, is warmed by one like it.
        runner = workload.runner(
            given,
            build,
            feed,
            steps=told,
            warm_data=warm,
            callbacks=settings.callbacks,
            warmup_steps=multiple if plan.whole else None,
        )
        return WholeRuns(runner, plan.examples, runner.run_second_epoch if plan.whole else None)

    return runner_for, timed_plan(base.batch_size).work(bool(settings.callbacks))
