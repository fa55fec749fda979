"""Measure a candidate against the baseline in alternated rounds, so machine drift cancels.

Each round times one run of the baseline and one of the candidate, back to back, in
alternating order (baseline first in even rounds, candidate first in odd ones), after a short
untimed run of each side that last ran before another model was built (it runs its next work
slower, once: ``FitRunner.rewarm``). The ratio of
each round is the candidate's examples/s over the baseline's in that round; the result is the
median ratio and its spread. The noise counts both sides: the baseline's own spread over the
rounds, ``(max - min) / median`` of its examples/s, plus the candidate's, at least
:data:`MIN_NOISE`. A candidate is faster only when its median ratio exceeds ``1 + noise`` and it
beat the baseline in more than half of the rounds (one round lost to a descheduled run does not
veto it, as it would if every round had to be won).

Why both spreads: a ratio moves when either side moves. With the baseline's spread alone, a
candidate whose own runs scatter (a batch that sometimes hits the allocator, a run that was
descheduled) passed on a steady baseline: issue 29's compute-bound batch 2048 read 1.25x in
three rounds and 0.91x by whole ``predict`` calls. The sum is the widest the ratio can move
when the two drift apart, so a gain beyond it is not the two runs' scatter.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from tfthroughput.tuning._trial_runner import TrialRunner

# A floor on the noise: two runs of the same code on a shared machine differ by a few percent
# even when a handful of rounds happen to agree.
MIN_NOISE = 0.03
_GPU_UTIL = "utilization_percent"
_SM_ACTIVITY = "sm_activity_percent"


@dataclass(frozen=True)
class Comparison:
    """A candidate measured against the baseline in the same rounds.

    Attributes:
        examples_per_second: Median examples/s of the candidate.
        baseline_examples_per_second: Median examples/s of the baseline in these rounds.
        ratio: Median of the per-round ratios (candidate / baseline).
        ratio_low: Lowest per-round ratio.
        ratio_high: Highest per-round ratio.
        noise: Combined relative spread of the baseline's and the candidate's runs in these
            rounds (their sum, at least ``MIN_NOISE``).
        gpu_utilization: Mean GPU-Util (%) over the candidate's runs, where a GPU is sampled.
        sm_activity: Mean SM activity (%) over the candidate's runs, where measured.
        baseline_speeds: The baseline's examples/s, round by round.
        speeds: The candidate's examples/s, round by round (two candidates timed in the same
            rounds compare round by round, so the rounds' drift cancels between them too).
        rounds_won: Rounds in which the candidate beat the baseline.
        rounds: Rounds timed.
    """

    examples_per_second: float
    baseline_examples_per_second: float
    ratio: float
    ratio_low: float
    ratio_high: float
    noise: float
    gpu_utilization: float | None = None
    sm_activity: float | None = None
    baseline_speeds: tuple[float, ...] = ()
    speeds: tuple[float, ...] = ()
    rounds_won: int = 0
    rounds: int = 0

    @property
    def faster(self) -> bool:
        """Whether the median ratio exceeds ``1 + noise`` and more than half the rounds beat
        the baseline."""
        return self.ratio > 1.0 + self.noise and 2 * self.rounds_won > self.rounds


class GPUWindows:
    """GPU-Util and SM activity over the candidate's runs only, from the package's sampler.

    Args:
        sampler: A started :class:`tfthroughput.hardware.sampler.Sampler` (with GPU sources),
            or ``None`` where no GPU is sampled.
    """

    def __init__(self, sampler: object | None) -> None:
        self._sampler = sampler
        self._sums: dict[str, list[float]] = {}

    def begin(self) -> None:
        self._sums = {_GPU_UTIL: [], _SM_ACTIVITY: []}
        if self._sampler is not None:
            self._sampler.collect(sample_now=True)  # drop what came before

    def after_candidate_run(self) -> None:
        if self._sampler is None:
            return
        stats = self._sampler.collect(sample_now=True)
        for key, value in stats.items():
            if key.source.startswith("gpu") and key.metric in self._sums:
                self._sums[key.metric].append(value.mean)

    def after_baseline_run(self) -> None:
        if self._sampler is not None:
            self._sampler.collect(sample_now=True)  # the baseline's window is not counted

    def mean(self, metric: str) -> float | None:
        values = self._sums.get(metric) or []
        return statistics.fmean(values) if values else None


def spread(speeds: list[float]) -> float:
    """``(max - min) / median`` of ``speeds``: how far one side's runs scatter."""
    return (max(speeds) - min(speeds)) / statistics.median(speeds)


def combined_noise(base_speeds: list[float], speeds: list[float]) -> float:
    """The noise a ratio of the two must beat: both sides' spreads, at least ``MIN_NOISE``.

    Example:
        >>> round(combined_noise([100.0, 90.0, 110.0], [200.0, 200.0, 220.0]), 2)
        0.3
    """
    return max(MIN_NOISE, spread(base_speeds) + spread(speeds))


def compare(
    baseline: TrialRunner,
    candidate: TrialRunner,
    rounds: int,
    gpu: GPUWindows | None = None,
    *,
    before_round: Callable[[], None] | None = None,
) -> Comparison:
    """Time ``rounds`` alternated runs of both; raises the candidate's ``TrialFailed``."""
    gpu = gpu or GPUWindows(None)
    gpu.begin()
    base_speeds, (speeds,) = _timed_rounds(baseline, [candidate], rounds, gpu, before_round)
    return _comparison(base_speeds, speeds, gpu)


def compare_together(
    baseline: TrialRunner, candidates: list[TrialRunner], rounds: int
) -> list[Comparison]:
    """Time the baseline and every candidate in the same ``rounds`` rounds, their order
    rotated each round (so no side always runs first or after the same other); one
    :class:`Comparison` per candidate against the baseline's runs of the same rounds. With
    one candidate this is :func:`compare`. Raises a candidate's ``TrialFailed``."""
    base_speeds, speeds = _timed_rounds(baseline, candidates, rounds, GPUWindows(None), None)
    return [_comparison(base_speeds, own, GPUWindows(None)) for own in speeds]


def _timed_rounds(
    baseline: TrialRunner,
    candidates: list[TrialRunner],
    rounds: int,
    gpu: GPUWindows,
    before_round: Callable[[], None] | None,
) -> tuple[list[float], list[list[float]]]:
    """Examples/s of the baseline's runs and of each candidate's, round by round."""
    sides = [baseline, *candidates]
    for runner in sides:  # a side that ran before another's start runs its next work slower, once
        runner.rewarm()
    speeds: list[list[float]] = [[] for _ in sides]
    for index in range(rounds):
        if before_round is not None:
            before_round()
        shift = index % len(sides)
        for position in [*range(shift, len(sides)), *range(shift)]:
            runner = sides[position]
            seconds = runner.run()
            speeds[position].append(runner.steps * runner.examples_per_step / max(seconds, 1e-9))
            if position == 0:
                gpu.after_baseline_run()
            else:
                gpu.after_candidate_run()
    return speeds[0], speeds[1:]


def _comparison(base_speeds: list[float], speeds: list[float], gpu: GPUWindows) -> Comparison:
    ratios = [speed / base for speed, base in zip(speeds, base_speeds, strict=True)]
    return Comparison(
        examples_per_second=statistics.median(speeds),
        baseline_examples_per_second=statistics.median(base_speeds),
        ratio=statistics.median(ratios),
        ratio_low=min(ratios),
        ratio_high=max(ratios),
        noise=combined_noise(base_speeds, speeds),
        gpu_utilization=gpu.mean(_GPU_UTIL),
        sm_activity=gpu.mean(_SM_ACTIVITY),
        baseline_speeds=tuple(base_speeds),
        speeds=tuple(speeds),
        rounds_won=sum(ratio > 1.0 for ratio in ratios),
        rounds=len(ratios),
    )
