"""The steps ``diagnose`` takes in both modes: the input alone, the rounds, the verdict.

Training (``training_diagnosis``) and inference (``inference_diagnosis``) differ in how they
time a step, (b) and (c); what they do before and after is here, once: the first batch, (a)
the input pipeline alone, the medians of the rounds, and the decision (the verdict, the
pipeline's lint and, where the input is the limit and the lint says nothing, its slowest stage).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

import tensorflow as tf

from tfthroughput.data.autotune import StageMeasurement
from tfthroughput.data.benchmark import benchmark_dataset, leading_dimension, rate
from tfthroughput.data.lint import PipelineLint
from tfthroughput.diagnosis._arguments import DiagnosisArguments
from tfthroughput.diagnosis._pipeline_facts import lint_or_none, slowest_stage
from tfthroughput.diagnosis.recommendations import SPEED_RULES
from tfthroughput.diagnosis.verdict import (
    BALANCED,
    INPUT_BOUND,
    input_bound_fraction,
    per,
    verdict,
)
from tfthroughput.hardware.cpu_share import CpuShare, CpuShareMeter

# Batches held in memory for the compute-only measurement (b). A few distinct batches are
# enough: the step's cost does not depend on the values, and memory stays small.
_CACHED_BATCHES = 4


@dataclasses.dataclass(frozen=True)
class Datasets:
    """The datasets the measurements read: the user's, repeated, and a few batches in memory."""

    first_batch: Any
    batch_size: int
    repeated: tf.data.Dataset
    in_memory: tf.data.Dataset


@dataclasses.dataclass
class Rounds:
    """What the alternated rounds of (b) and (c) measured, gathered as they run."""

    compute_seconds: list[float] = dataclasses.field(default_factory=list)
    seconds: list[float] = dataclasses.field(default_factory=list)
    utilizations: list[float] = dataclasses.field(default_factory=list)
    sm_activities: list[float] = dataclasses.field(default_factory=list)

    def add_readings(self, utilization: float | None, sm_activity: float | None) -> None:
        """Keep the probe's readings of one (c) round (``None``: not read)."""
        if utilization is not None:
            self.utilizations.append(utilization)
        if sm_activity is not None:
            self.sm_activities.append(sm_activity)


@dataclasses.dataclass(frozen=True)
class Measurement:
    """The medians of (a), (b) and (c) in batches per second, the GPU's mean readings, and the
    cores the process used and other programs took while (a) ran."""

    input_rate: float
    compute_rate: float
    rate: float
    gpu_utilization: float | None
    sm_activity: float | None
    input_cpu: CpuShare | None = None


@dataclasses.dataclass(frozen=True)
class Decision:
    """The verdict, the input-bound fraction it rests on, and what the pipeline said."""

    fraction: float
    verdict: str
    lint: PipelineLint | None
    slowest_stage: StageMeasurement | None


def prepare_datasets(dataset: tf.data.Dataset, steps: int) -> Datasets:
    """The first batch (a ``ValueError`` if there is none), the repeated dataset and (b)'s."""
    first_batch = next(iter(dataset.take(1)), None)
    if first_batch is None:
        raise ValueError(f"`dataset` yielded no batch. Received: dataset={dataset!r}")
    in_memory = (
        dataset.take(min(_CACHED_BATCHES, steps)).cache().repeat().prefetch(tf.data.AUTOTUNE)
    )
    return Datasets(first_batch, leading_dimension(first_batch), dataset.repeat(), in_memory)


def input_rates(
    arguments: DiagnosisArguments, repeated: tf.data.Dataset
) -> tuple[list[float], CpuShare | None]:
    """(a): ``repeats`` runs of the input alone after a warm-up run, in batches per second,
    and the cores used meanwhile.

    Each benchmark creates a fresh iterator, and ``batches_per_second`` excludes each run's
    first batch. The CPU share spans the timed runs: a pipeline that ran on one of two cores
    because another program held the other is told apart from one that does not parallelise.
    """
    steps, clock = arguments.steps, arguments.clock
    benchmark_dataset(repeated, steps + 1, clock=clock)  # warm-up
    meter, rates = CpuShareMeter(), []
    for _ in range(arguments.repeats):
        meter.start()
        rates.append(benchmark_dataset(repeated, steps + 1, clock=clock).batches_per_second)
        meter.stop()
    return rates, meter.share()


def summarize(
    steps: int, rates_of_input: list[float], rounds: Rounds, input_cpu: CpuShare | None = None
) -> Measurement:
    """The medians of the repeats, which one lucky or unlucky run cannot move."""
    utilizations, sm_activities = rounds.utilizations, rounds.sm_activities
    return Measurement(
        input_rate=statistics.median(rates_of_input),
        compute_rate=rate(steps, statistics.median(rounds.compute_seconds)),
        rate=rate(steps, statistics.median(rounds.seconds)),
        gpu_utilization=sum(utilizations) / len(utilizations) if utilizations else None,
        sm_activity=sum(sm_activities) / len(sm_activities) if sm_activities else None,
        input_cpu=input_cpu,
    )


def decide(
    arguments: DiagnosisArguments, measured: Measurement, repeated: tf.data.Dataset
) -> Decision:
    """The verdict; the pipeline's slowest stage only where the input is the limit and its
    lint found nothing that costs throughput."""
    fraction = input_bound_fraction(measured.compute_rate, measured.rate)
    decided = verdict(
        fraction,
        per(measured.compute_rate),
        arguments.thresholds,
        gpu_utilization=measured.gpu_utilization,
        sm_activity=measured.sm_activity,
    )
    lint = lint_or_none(arguments.dataset)
    slowest = None
    input_limits = (
        decided in (INPUT_BOUND, BALANCED) and measured.input_rate < measured.compute_rate
    )
    if input_limits and lint is not None:
        if not any(finding.rule in SPEED_RULES for finding in lint.findings):
            slowest = slowest_stage(repeated, arguments.steps)
    return Decision(fraction, decided, lint, slowest)
