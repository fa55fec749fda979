"""The one search of ``tune``, for either mode: the baseline, the knobs in the workload's order,
one trial at a time against the baseline within the time budget, the best so far, the
confirmation and the result.

A knob (``knobs/``) is a strategy: a generator given a read-only :class:`SearchView` that
yields the :class:`Proposal` s it wants tried and is sent each judged trial back (``None``
once the budget is spent). It is off the stack while a trial runs; the search alone runs
trials. A :class:`Workload` is what a mode brings (``training/``, ``inference/``): its
runners, the judgement of a compared runner (which may ask for more runners, started here
with the judge suspended alike), the confirmation, the result, and its knobs. The rules live
here once:

- A trial is skipped when the time left is less than 1.25 times the cost of the dearest of the
  last three trials (``verdict.over_budget``).
- Every trial is measured against the baseline in alternated rounds (``measure.compare``),
  judged by the paired rule (``paired``), rounds added until it settles or the budget is spent.
- A ``"faster"`` trial becomes the best setup when its median ratio beats the best so far by
  the workload's ``best_margin``.
"""

from __future__ import annotations

import contextlib
import inspect
import statistics
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from typing import Any

import keras

from tfthroughput.diagnosis.trial_memory import collections_of_new_objects_only
from tfthroughput.tuning.engine.confirmation import confirm, contenders, picks, run_examples
from tfthroughput.tuning.engine.contract import (
    BestSoFar,
    Proposal,
    SearchSettings,
    SearchView,
    Workload,
)
from tfthroughput.tuning.engine.environment import clear_session, gpu_sampler, random_state_kept
from tfthroughput.tuning.engine.measure import GPUWindows, compare
from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.engine.verdict import FAILED, FASTER, as_given, over_budget

# Timed runs of the baseline are lengthened to at most this many times its warm-up.
MAX_LENGTHENING = 64


def lengthen(
    runner: Any, set_steps: Callable[[int], None], *, min_seconds: float, steps: int
) -> None:
    """Double the baseline's timed run (``set_steps``) until it lasts ``min_seconds``, up to
    :data:`MAX_LENGTHENING` times ``steps``; sets its ``solo_speed``. Shorter runs measure the
    scheduler more than the work."""
    most = steps * MAX_LENGTHENING
    seconds = runner.run()
    while seconds < min_seconds and runner.steps < most:
        set_steps(runner.steps * 2)
        seconds = runner.run()
    runner.solo_speed = runner.steps * runner.examples_per_step / max(seconds, 1e-9)


class Search:
    """One search of a workload, in a clean Keras session (the policy in force and the
    caller's random state restored after), its garbage collections scanning only what it
    made, GPU-Util sampled where there is a GPU; :meth:`run` returns the result.

    Args:
        workload: The mode's workload.
        settings: The mode's search settings.
        clock: Seconds clock.
    """

    def __init__(self, workload: Workload, settings: SearchSettings, clock: Callable) -> None:
        self.workload, self.settings, self.clock = workload, settings, clock
        self.view = SearchView(self)
        self.trials: list[Any] = []
        self.notes = list(settings.notes)
        self.stopped = False
        self.base: Any = None  # the baseline's runner, alive for every trial's rounds
        self.best: BestSoFar | None = None
        self._baseline_speeds: list[float] = []
        self._costs: list[float] = []
        self._start = self._rounds_began = 0.0
        self._gpu = GPUWindows(None)

    def run(self) -> Any:
        """Measure the baseline, try the knobs, confirm the best; the workload's result."""
        with self._session():
            self._start = self.clock()
            self._measure_baseline()
            try:
                for knob in self.workload.knobs:
                    proposals, trial = knob(self.view), None
                    while (proposal := _next(proposals, trial)) is not None:
                        trial = self.trial(proposal)
            finally:
                self.base.close()
            seconds = self.clock() - self._start  # the search's own: the confirmation has its own
            confirmation, planned = None, self._confirmation_plan()
            if planned is not None:  # timed here, not in a method: the user's fit nearer tune
                candidates, most = planned
                plan = self.workload.confirmation(self.view, candidates, most)
                rounds, clock = self.settings.confirm_rounds, self.clock
                timed = confirm(
                    plan.runner_for,
                    self.base.setup,
                    candidates,
                    rounds=rounds,
                    clock=clock,
                    work=plan.work,
                )
                confirmation = plan.finish(timed)
            speeds = self._baseline_speeds or [self.base.solo_speed]
            self.trials.insert(0, self.workload.trial_type(**as_given(self.base, speeds)))
            return self.workload.result(
                baseline=self.base.setup,
                chosen=self.best.setup if confirmation is None else confirmation.setup,
                trials=tuple(self.trials),
                seconds=seconds,
                time_budget=self.settings.time_budget,
                stopped_by_budget=self.stopped,
                notes=tuple(self.notes),
                confirmation=confirmation,
            )

    @contextlib.contextmanager
    def _session(self) -> Iterator[None]:
        policy_in_force = keras.config.dtype_policy()
        with random_state_kept():
            clear_session(policy_in_force)
            sampler = gpu_sampler()
            self._gpu = GPUWindows(sampler)
            try:
                with collections_of_new_objects_only():
                    yield
            finally:
                if sampler is not None:
                    sampler.stop()
                clear_session(policy_in_force)

    def trial(self, proposal: Proposal) -> Any:
        """One trial of a proposal against the baseline, judged; ``None`` when the time budget
        ran out."""
        if self._out_of_time():
            return None
        start, setup = self.clock(), proposal.setup
        if proposal.label is None:
            proposal = replace(proposal, label=setup.changes_from(self.base.setup))
        comparison = runner = None
        try:  # a knob that cannot take the user's input fails its trial with one line
            runner = self.workload.candidate(self.view, proposal)
            runner.start()
            self._rounds_began = self.clock()
            comparison = compare(
                self.base,
                runner,
                self.settings.rounds,
                self._gpu,
                before_round=lambda: (self.base.before_round(), runner.before_round()),
                more=self._more,
            )
            trial = self.workload.judge(self.view, proposal, runner, comparison)
            if inspect.isgenerator(trial):  # it asks for runners first: started here, not under it
                judging, started = trial, None
                while True:
                    try:
                        needed = judging.send(started)
                    except StopIteration as judged:
                        trial = judged.value
                        break
                    try:
                        needed.start()
                        started = True
                    except TrialFailed:
                        started = False
        except TrialFailed as error:
            trial = self.workload.trial_type(setup, proposal.label, FAILED, reason=str(error))
            comparison = None
        else:
            self._baseline_speeds += comparison.baseline_speeds
        finally:
            if runner is not None:
                runner.close()
        self._costs.append(self.clock() - start)
        self.trials.append(trial)
        # Each trial was measured against the baseline in its own rounds, so drift between
        # trials cancels and the median ratios compare.
        margin = 1.0 + self.workload.best_margin
        if trial.status == FASTER and comparison.ratio > self.best.ratio * margin:
            self.best = BestSoFar(setup, comparison, runner.reference)
        return trial

    def _measure_baseline(self) -> None:
        try:
            runner = self.workload.baseline()
        except TrialFailed as error:
            raise RuntimeError(
                f"{self.workload.cannot_run}, so there is nothing to tune: {error}"
            ) from error
        self.base = runner
        self.best = BestSoFar(runner.setup, None, runner.reference)
        self._costs.append(self.clock() - self._start)

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

    def _confirmation_plan(self) -> tuple[list, float] | None:
        """What the workload's confirmation times: the pick and its rivals, and the most
        examples in one piece of work; ``None`` where nothing beat the baseline or the
        confirmation is off. One piece of work holds its share of the search's time at the
        speeds the search measured, never fewer examples than the search's own runs."""
        rounds = self.settings.confirm_rounds
        candidates = picks(self.trials, self.best.setup, self.base.setup) if rounds else []
        if not candidates:
            return None
        speeds = self._baseline_speeds or [self.base.solo_speed or 1.0]
        elapsed = self.clock() - self._start
        searched = {trial.setup: trial.ratio for trial in self.trials if trial.ratio}
        ratios = [searched.get(setup, 1.0) for setup, _ in contenders(candidates, self.base.setup)]
        most = max(
            run_examples(statistics.median(speeds), elapsed, rounds, ratios),
            self.base.steps * self.base.examples_per_step,
        )
        return candidates, most


def _next(proposals: Generator[Proposal, Any, None], trial: Any) -> Proposal | None:
    """The knob's next proposal, sent the last trial (``None`` before its first)."""
    try:
        return proposals.send(trial)
    except StopIteration:
        return None
