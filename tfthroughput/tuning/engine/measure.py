"""Measure a candidate against the baseline in alternated rounds, so machine drift cancels.

Each round times one run of the baseline and one of the candidate, back to back, in
alternating order (baseline first in even rounds, candidate first in odd ones), after a short
untimed run of each side that last ran before another model was built (it runs its next work
slower, once: ``FitRunner.rewarm``). The ratio of each round is the candidate's examples/s over
the baseline's in that round; the comparison is judged on those ratios alone by the paired
rule (``engine.paired``): their median with its sign-test interval, rounds added until it settles.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from tfthroughput.tuning.engine.paired import FASTER, MAX_ROUNDS, MIN_GAIN, paired_ratio, settled
from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.engine.trial_runner import TrialRunner

# The least gain the search counts (a knob's line going on, inference's best setup changing):
# the paired rule's own threshold.
MIN_NOISE = MIN_GAIN
_GPU_UTIL = "utilization_percent"
_SM_ACTIVITY = "sm_activity_percent"


@dataclass(frozen=True)
class Comparison:
    """A candidate measured against the baseline in the same rounds.

    Attributes:
        examples_per_second: Median examples/s of the candidate.
        baseline_examples_per_second: Median examples/s of the baseline in these rounds.
        ratio: Median of the per-round ratios (candidate / baseline).
        ratio_low: Low end of the median's sign-test interval (``engine.paired``).
        ratio_high: Its high end.
        noise: The interval's half-width relative to the median.
        gpu_utilization: Mean GPU-Util (%) over the candidate's runs, where a GPU is sampled.
        sm_activity: Mean SM activity (%) over the candidate's runs, where measured.
        baseline_speeds: The baseline's examples/s, round by round.
        speeds: The candidate's examples/s, round by round (two candidates timed in the same
            rounds compare round by round, so the rounds' drift cancels between them too).
        rounds_won: Rounds in which the candidate beat the baseline.
        rounds: Rounds timed.
        coverage: The interval's coverage of the median (at least 0.90 from 5 rounds on).
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
    coverage: float = 0.0

    @property
    def verdict(self) -> str:
        """The paired rule's word: ``"faster"``, ``"slower"`` or ``"not shown faster"``."""
        return paired_ratio(self.ratios).verdict

    @property
    def faster(self) -> bool:
        """Whether the interval's low end exceeds ``1 + MIN_GAIN`` (``engine.paired``)."""
        return self.verdict == FASTER

    @property
    def ratios(self) -> tuple[float, ...]:
        """The per-round ratios, candidate over baseline."""
        return tuple(s / b for s, b in zip(self.speeds, self.baseline_speeds, strict=True))


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


def compare(
    baseline: TrialRunner,
    candidate: TrialRunner,
    rounds: int,
    gpu: GPUWindows | None = None,
    *,
    before_round: Callable[[], None] | None = None,
    more: Callable[[int], bool] | None = None,
    cap: int = MAX_ROUNDS,
) -> Comparison:
    """Time at least ``rounds`` alternated runs of both, then add rounds until the paired rule
    settles (``engine.paired.settled``), ``cap`` rounds are run or ``more(rounds_run)`` says no to
    another round; raises the candidate's ``TrialFailed``."""
    gpu = gpu or GPUWindows(None)
    gpu.begin()
    base_speeds, (speeds,) = _timed_rounds(
        baseline, [candidate], rounds, gpu, before_round, more=more, cap=cap
    )
    return _comparison(base_speeds, speeds, gpu)


def compare_together(
    baseline: TrialRunner,
    candidates: list[TrialRunner],
    rounds: int,
    *,
    more: Callable[[int], bool] | None = None,
    cap: int = MAX_ROUNDS,
    dropped: Callable[[TrialRunner], None] | None = None,
) -> list[Comparison | TrialFailed]:
    """Time the baseline and every candidate in the same rounds, their order rotated each
    round (so no side always runs first or after the same other), at least ``rounds`` and
    more until every candidate's comparison settles (as :func:`compare`); one
    :class:`Comparison` per candidate against the baseline's runs of the same rounds.

    A candidate whose run fails gets its ``TrialFailed`` in its place, is handed to
    ``dropped`` (to free what it holds) and the rounds are run again without it; where the
    baseline's own run fails, every candidate still timed gets that failure."""
    found: dict[int, Comparison | TrialFailed] = {}
    timed = dict(enumerate(candidates))
    while timed:
        try:
            base_speeds, speeds = _timed_rounds(
                baseline, list(timed.values()), rounds, GPUWindows(None), None, more=more, cap=cap
            )
        except TrialFailed as error:
            failed = next((i for i, runner in timed.items() if runner is error.side), None)
            if failed is None:  # the baseline's own run failed: nothing compares
                found.update(dict.fromkeys(timed, error))
                break
            found[failed], runner = error, timed.pop(failed)
            if dropped is not None:
                dropped(runner)
            continue
        found.update(
            (index, _comparison(base_speeds, own, GPUWindows(None)))
            for index, own in zip(timed, speeds, strict=True)
        )
        break
    return [found[index] for index in range(len(candidates))]


def _timed_rounds(
    baseline: TrialRunner,
    candidates: list[TrialRunner],
    rounds: int,
    gpu: GPUWindows,
    before_round: Callable[[], None] | None,
    *,
    more: Callable[[int], bool] | None,
    cap: int,
) -> tuple[list[float], list[list[float]]]:
    """Examples/s of the baseline's runs and of each candidate's, round by round."""
    sides = [baseline, *candidates]
    runner = baseline  # the side running: a failure names it, for callers timing several
    try:
        # A side that ran before another's start runs its next work slower, once.
        for runner in sides:
            runner.rewarm()
        speeds: list[list[float]] = [[] for _ in sides]
        index = 0
        while True:
            if before_round is not None:
                before_round()
            shift = index % len(sides)
            for position in [*range(shift, len(sides)), *range(shift)]:
                runner = sides[position]
                seconds = runner.run()
                speeds[position].append(
                    runner.steps * runner.examples_per_step / max(seconds, 1e-9)
                )
                if position == 0:
                    gpu.after_baseline_run()
                else:
                    gpu.after_candidate_run()
            index += 1
            if index < rounds:
                continue
            if index >= max(cap, rounds) or (more is not None and not more(index)):
                break
            found = [
                paired_ratio([s / b for s, b in zip(own, speeds[0], strict=True)])
                for own in speeds[1:]
            ]
            if all(settled(f, cap=max(cap, rounds)) for f in found):
                break
    except TrialFailed as error:
        error.side = runner
        raise
    return speeds[0], speeds[1:]


def _comparison(base_speeds: list[float], speeds: list[float], gpu: GPUWindows) -> Comparison:
    found = paired_ratio([speed / base for speed, base in zip(speeds, base_speeds, strict=True)])
    return Comparison(
        examples_per_second=statistics.median(speeds),
        baseline_examples_per_second=statistics.median(base_speeds),
        ratio=found.median,
        ratio_low=found.low,
        ratio_high=found.high,
        noise=found.half_width,
        gpu_utilization=gpu.mean(_GPU_UTIL),
        sm_activity=gpu.mean(_SM_ACTIVITY),
        baseline_speeds=tuple(base_speeds),
        speeds=tuple(speeds),
        rounds_won=sum(ratio > 1.0 for ratio in found.ratios),
        rounds=len(found.ratios),
        coverage=found.coverage,
    )
