"""The one search of ``tune``, for either workload: the baseline, the knobs in the workload's
order, one trial at a time against the baseline within the time budget, the best so far, the
confirmation and the result.

What differs between training and inference is the :class:`Workload` the search is given
(``training.workload``, ``inference.workload``): how a trial's runner is built and what one
timed piece of its work is, how its math is checked (the loss, the outputs), which knobs are
tried in which order, and the result it makes. The rules live here once:

- A trial is skipped when the time left is less than 1.25 times the cost of the dearest of the
  last three trials (:func:`~tfthroughput.tuning.engine.verdict.over_budget`).
- Every trial is measured against the baseline in alternated rounds (``measure.compare``),
  judged by the paired rule (``paired``), rounds added until it settles or the budget is spent.
- A ``"faster"`` trial becomes the best setup when its median ratio beats the best so far by
  the workload's ``best_margin`` (training: any gain; inference: the noise floor, so a knob
  that gains nothing measurable is not added).
- The best so far is a :class:`BestSoFar` record; it keeps its runner's reference for later
  math checks (``Workload.reference_of``: inference's outputs, which a trial that only adds
  ``steps_per_execution`` must match).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import keras

from tfthroughput.diagnosis.trial_memory import collections_of_new_objects_only
from tfthroughput.tuning.engine.confirmation import Confirmation, contenders, picks, run_examples
from tfthroughput.tuning.engine.environment import clear_session, gpu_sampler, random_state_kept
from tfthroughput.tuning.engine.measure import Comparison, GPUWindows, compare
from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.engine.verdict import FAILED, FASTER, as_given, over_budget
from tfthroughput.tuning.setup import TuneSetup

# Timed runs of the baseline are lengthened to at most this many times its warm-up.
MAX_LENGTHENING = 64


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """What every search is told; each mode's settings add their own fields."""

    steps: int
    rounds: int
    time_budget: float
    seed: int
    max_steps_per_execution: int
    policy: str | None  # the recommended policy to try, or None
    try_xla: bool
    notes: tuple[str, ...]
    confirm_rounds: int = 0  # rounds of the confirmation (0: none)


def lengthen(
    runner: Any, set_steps: Callable[[int], None], *, min_seconds: float, steps: int
) -> float:
    """Double the baseline's timed run (``set_steps``) until it lasts ``min_seconds``, up to
    :data:`MAX_LENGTHENING` times ``steps``; the seconds of its last run. Shorter runs
    measure the scheduler more than the work."""
    most = steps * MAX_LENGTHENING
    seconds = runner.run()
    while seconds < min_seconds and runner.steps < most:
        set_steps(runner.steps * 2)
        seconds = runner.run()
    return seconds


@dataclass(frozen=True)
class BestSoFar:
    """The best setup so far: the baseline's until a trial beats it.

    Attributes:
        setup: Its setup.
        comparison: Its comparison with the baseline; ``None`` for the baseline itself.
        reference: What its runner kept for later checks (``Workload.reference_of``).
    """

    setup: TuneSetup
    comparison: Comparison | None = None
    reference: Any = None

    @property
    def ratio(self) -> float:
        """Its median ratio to the baseline (1.0 for the baseline)."""
        return 1.0 if self.comparison is None else self.comparison.ratio


class Workload:
    """What a mode of ``tune`` brings to the search; subclasses define the methods without a
    default. Its runners are ``FitRunner``, ``PredictRunner`` (both ``TrialRunner``s), or a
    test's with known costs.

    Args:
        build_model: The user's builder.
        data: The data, as the mode reads it.
        settings: The mode's search settings.
        clock: Seconds clock.

    Attributes:
        knobs: The knobs in the order tried, each called with the search.
        trial_type: The mode's trial class (``TuneTrial``, ``InferenceTrial``).
        cannot_run: Why there is nothing to tune when the baseline fails, as a sentence's start.
        best_margin: What a faster trial's ratio must beat the best's by to become the best.
    """

    knobs: tuple[Callable[[Search], None], ...] = ()
    trial_type: type
    cannot_run: str
    best_margin = 0.0

    def __init__(
        self, build_model: Callable[[], Any], data: Any, settings: Any, clock: Callable
    ) -> None:
        self.build_model, self.data, self.settings, self.clock = build_model, data, settings, clock

    def baseline(self) -> Any:
        """The model as given, started and its timed run set; raises ``TrialFailed``."""
        raise NotImplementedError

    def candidate(self, search: Search, setup: TuneSetup, **how: Any) -> Any:
        """A runner for ``setup``, not started yet (``how``: what the knob asks of it)."""
        raise NotImplementedError

    def judge(self, search: Search, setup, label, runner, comparison, **how: Any) -> Any:
        """The trial of a started and compared runner: its math checked, its status."""
        raise NotImplementedError

    def search_run_examples(self, search: Search) -> float:
        """Examples in one of the search's timed runs of the baseline."""
        raise NotImplementedError

    def confirm(self, search: Search, candidates: list, most: float) -> Confirmation:
        """The pick confirmed by the workload's own piece of work, at most ``most`` examples."""
        raise NotImplementedError

    def chosen_notes(self, baseline: TuneSetup, chosen: TuneSetup) -> list[str]:
        """What the chosen setup changes for the user, as sentences."""
        raise NotImplementedError

    def result(self, **fields: Any) -> Any:
        """The mode's result from the fields every result has."""
        raise NotImplementedError

    def before_round(self, base: Any, runner: Any) -> Callable[[], None] | None:
        """What to do before each alternated round (sample latencies); nothing by default."""
        return None

    def reference_of(self, runner: Any) -> Any:
        """What the best setup's runner keeps for later checks (its outputs); by default
        nothing: every trial is checked against the baseline."""
        return None

    def search_speeds(self, base: Any) -> list[float]:
        """The baseline's own examples/s, shown where no comparison ran; by default none:
        its speed comes from the rounds only."""
        return []

    def baseline_figures(self, base: Any) -> dict[str, Any]:
        """The baseline trial's fields besides its speed, read from its runner at the end."""
        return {}


class Search:
    """One run of the search for a workload; :meth:`run` returns its result.

    Args:
        workload: The mode's workload class (``TrainingWorkload``, ``InferenceWorkload``).
        build_model: The user's builder (in the strategy's scope where there is one).
        data: The data, as the mode reads it.
        settings: The mode's search settings.
        clock: Seconds clock.
        gpu: GPU-Util windows over the candidates' runs.
        **options: The workload's own (a test's runner).
    """

    def __init__(
        self,
        workload: Callable[..., Workload],
        build_model: Callable[[], Any],
        data: Any,
        settings: SearchSettings,
        clock: Callable[[], float],
        gpu: GPUWindows,
        **options: Any,
    ) -> None:
        self.workload = workload(build_model, data, settings, clock, **options)
        self.settings, self.clock, self._gpu = settings, clock, gpu
        self._start = self.clock()
        self._costs: list[float] = []
        self.trials: list[Any] = []
        self.notes = list(self.settings.notes)
        self.stopped = False
        self.base: Any = None  # the baseline's runner, alive for every trial's rounds
        self.base_setup: TuneSetup | None = None
        self.best: BestSoFar | None = None
        self.baseline_speeds: list[float] = []
        self._rounds_began = 0.0  # when the current comparison's rounds began (``_more``)

    @property
    def best_ratio(self) -> float:
        """The best setup's median ratio to the baseline (1.0 while the baseline is the best)."""
        return self.best.ratio

    def run(self) -> Any:
        """Measure the baseline, try the knobs, confirm the best; the workload's result."""
        self._measure_baseline()
        try:
            for knob in self.workload.knobs:
                knob(self)
        finally:
            self.base.close()
        seconds = self.clock() - self._start  # the search's own: the confirmation has its own
        confirmation = self._confirm()
        chosen = self.best.setup if confirmation is None else confirmation.setup
        speeds = self.baseline_speeds or self.workload.search_speeds(self.base)
        if speeds:  # the rounds' median, the baseline's ratio 1 by definition
            figures = self.workload.baseline_figures(self.base)
            median = statistics.median(speeds)
            self.trials[0] = replace(self.trials[0], examples_per_second=median, ratio=1.0)
            self.trials[0] = replace(self.trials[0], **figures)
        return self.workload.result(
            baseline=self.base_setup,
            chosen=chosen,
            trials=tuple(self.trials),
            seconds=seconds,
            time_budget=self.settings.time_budget,
            stopped_by_budget=self.stopped,
            notes=tuple(self.notes + self.workload.chosen_notes(self.base_setup, chosen)),
            confirmation=confirmation,
        )

    def try_setup(self, setup: TuneSetup, *, label: str | None = None, **how: Any) -> Any:
        """Run one trial of ``setup`` against the baseline and judge it; ``None`` when the
        time budget ran out. ``how`` goes to the workload's runner and judge."""
        if self._out_of_time():
            return None
        start = self.clock()
        label = label or setup.changes_from(self.base_setup)
        comparison = reference = runner = None
        try:  # a knob that cannot take the user's input fails its trial with one line
            runner = self.workload.candidate(self, setup, **how)
            runner.start()
            before_round = self.workload.before_round(self.base, runner)
            rounds = self.settings.rounds
            self._rounds_began = self.clock()
            comparison = compare(
                self.base, runner, rounds, self._gpu, before_round=before_round, more=self._more
            )
        except TrialFailed as error:
            trial = self.workload.trial_type(setup, label, FAILED, reason=str(error))
            comparison = None
        else:
            trial = self.workload.judge(self, setup, label, runner, comparison, **how)
            reference = self.workload.reference_of(runner)
            self.baseline_speeds += comparison.baseline_speeds
        finally:
            if runner is not None:
                runner.close()
        self._costs.append(self.clock() - start)
        self.trials.append(trial)
        # Each trial was measured against the baseline in its own rounds, so drift between
        # trials cancels and the median ratios compare.
        margin = 1.0 + self.workload.best_margin
        if trial.status == FASTER and comparison.ratio > self.best_ratio * margin:
            self.best = BestSoFar(setup, comparison, reference)
        return trial

    def _measure_baseline(self) -> None:
        start = self.clock()
        try:
            runner = self.workload.baseline()
        except TrialFailed as error:
            raise RuntimeError(
                f"{self.workload.cannot_run}, so there is nothing to tune: {error}"
            ) from error
        self.base, self.base_setup = runner, runner.setup
        self.best = BestSoFar(runner.setup, None, self.workload.reference_of(runner))
        self._costs.append(self.clock() - start)
        self.trials.append(self.workload.trial_type(**as_given(runner)))

    def _more(self, rounds_run: int) -> bool:
        """Whether a comparison may add a round: one more round at the cost of the rounds so
        far, and as much again for the trial's end (its judgement, its model released), fit
        in the search's budget."""
        now = self.clock()
        per_round = (now - self._rounds_began) / max(rounds_run, 1)
        return now - self._start + 2 * per_round <= self.settings.time_budget

    def _out_of_time(self) -> bool:
        elapsed = self.clock() - self._start
        if over_budget(elapsed, self._costs, self.settings.time_budget):
            self.stopped = True
        return self.stopped

    def _confirm(self) -> Confirmation | None:
        """The pick and the next-best confirmed by the workload's piece of work, or ``None``
        where nothing beat the baseline or the confirmation is off. One piece of work holds
        its share of the search's time at the speeds the search measured, never fewer examples
        than the search's own runs."""
        rounds = self.settings.confirm_rounds
        candidates = picks(self.trials, self.best.setup, self.base_setup) if rounds else []
        if not candidates:
            return None
        speeds = self.baseline_speeds or self.workload.search_speeds(self.base) or [1.0]
        elapsed = self.clock() - self._start
        searched = {trial.setup: trial.ratio for trial in self.trials if trial.ratio}
        ratios = [searched.get(setup, 1.0) for setup, _ in contenders(candidates)]
        most = max(
            run_examples(statistics.median(speeds), elapsed, rounds, ratios),
            self.workload.search_run_examples(self),
        )
        return self.workload.confirm(self, candidates, most)


def run_search(
    workload: Callable[..., Workload],
    build_model: Callable[[], Any],
    data: Any,
    settings: SearchSettings,
    clock: Callable[[], float],
) -> Any:
    """The workload's result of one search, run in a clean Keras session (the policy in force
    and the caller's random state restored after), its garbage collections scanning only what
    it made, with GPU-Util sampled where there is a GPU."""
    policy_in_force = keras.config.dtype_policy()
    with random_state_kept():
        clear_session(policy_in_force)
        sampler = gpu_sampler()
        try:
            with collections_of_new_objects_only():
                search = Search(workload, build_model, data, settings, clock, GPUWindows(sampler))
                return search.run()
        finally:
            if sampler is not None:
                sampler.stop()
            clear_session(policy_in_force)
