"""The engine's contract (``engine.search`` runs it): what every search is told, what a knob
is given (a read-only :class:`SearchView` with the mode's :class:`Mode`) and proposes
(:class:`Proposal`), what a mode brings (:class:`Workload`) and what a trial's runner does
(:class:`Runner`), and the best setup so far (:class:`BestSoFar`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from tfthroughput.tuning.engine.confirmation import ConfirmationPlan
from tfthroughput.tuning.engine.measure import Comparison
from tfthroughput.tuning.setup import TuneSetup


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


@dataclass(frozen=True)
class Proposal:
    """A setup a knob asks the search to try.

    Attributes:
        setup: The setup.
        label: Its label in the table; by default what it changes from the baseline.
        probe: The compute-only probe: the baseline's own model on one batch held in memory,
            timed, never judged (training only).
    """

    setup: TuneSetup
    label: str | None = None
    probe: bool = False


Knob = Callable[["SearchView"], Generator[Proposal, Any, None]]


class Runner(Protocol):
    """A trial's model as the search drives it (``engine.trial_runner.TrialRunner``)."""

    setup: TuneSetup
    steps: int
    examples_per_step: int
    reference: Any  # what a later trial may be checked against (inference: its outputs)
    solo_speed: float | None  # examples/s of its own lengthened run (the baseline's)

    def start(self) -> None: ...
    def before_round(self) -> None: ...
    def run(self) -> float: ...
    def figures(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Mode:
    """What a knob needs to know of the search's mode, one record for both.

    Attributes:
        data: The data as the mode reads it (``TrainingData``, ``InferenceData``).
        line_ends: The statuses that end a line of values (a failure; in inference also
            outputs off and a batch over the latency limit).
        most_batch_factor: The largest batch tried, times the given one.
        steps_per_execution_bound: For a setup, the largest ``steps_per_execution`` worth
            trying on it, and why where that is below twice the given one.
        epoch_steps: The user's epoch, which ``steps_per_execution`` must divide (or ``None``).
        latency_limit_ms: The p95 latency a batch may take (inference), or ``None``.
        baseline_p95_ms: The given batch's p95 latency, sampled when asked.
        pipeline_plan: The rebuilt input pipeline's plan (training; raises on an input it
            cannot read), made once.
    """

    data: Any
    line_ends: frozenset[str]
    most_batch_factor: int
    steps_per_execution_bound: Callable[[TuneSetup], tuple[int, str]]
    epoch_steps: int | None = None
    latency_limit_ms: float | None = None
    baseline_p95_ms: Callable[[], float | None] = lambda: None
    pipeline_plan: Callable[[], Any] | None = None


@dataclass(frozen=True)
class BestSoFar:
    """The best setup so far: the baseline's until a trial beats it.

    Attributes:
        setup: Its setup.
        comparison: Its comparison with the baseline; ``None`` for the baseline itself.
        reference: What its runner kept for later checks (``Runner.reference``).
    """

    setup: TuneSetup
    comparison: Comparison | None = None
    reference: Any = None

    @property
    def ratio(self) -> float:
        """Its median ratio to the baseline (1.0 for the baseline)."""
        return 1.0 if self.comparison is None else self.comparison.ratio


class Workload:
    """What a mode of ``tune`` brings to the search; subclasses define the methods.

    Attributes:
        knobs: The knobs in the order tried.
        mode: What the knobs need to know of the mode, set by :meth:`baseline`.
        trial_type: The mode's trial class (``TuneTrial``, ``InferenceTrial``).
        cannot_run: Why there is nothing to tune when the baseline fails, as a sentence's start.
        best_margin: What a faster trial's ratio must beat the best's by to become the best.
    """

    knobs: tuple[Knob, ...] = ()
    mode: Mode
    trial_type: type
    cannot_run: str
    best_margin = 0.0

    def baseline(self) -> Runner:
        """The model as given, started and its timed run set; raises ``TrialFailed``."""
        raise NotImplementedError

    def candidate(self, view: SearchView, proposal: Proposal) -> Runner:
        """A runner for a proposal, not started yet."""
        raise NotImplementedError

    def judge(self, view: SearchView, proposal: Proposal, runner: Any, comparison) -> Any:
        """The trial of a started and compared runner: its math checked, its status. Or a
        generator that yields runners it needs started first (the loss check's passes of the
        input), is sent whether each started, and returns the trial: the search starts them,
        so their fits run as near ``tune`` as a trial's own."""
        raise NotImplementedError

    def confirmation(self, view: SearchView, candidates: list, most: float) -> ConfirmationPlan:
        """How the pick and its rivals are confirmed: the mode's own piece of work, at most
        ``most`` examples, and the runners that time it (the search runs it)."""
        raise NotImplementedError

    def result(self, **fields: Any) -> Any:
        """The mode's result from the fields every result has (its notes added)."""
        raise NotImplementedError


class SearchView:
    """What a knob and a workload's judgement may read of the search; notes are its only
    writing."""

    def __init__(self, search: Any) -> None:  # engine.search.Search
        self._search = search

    @property
    def base(self) -> TuneSetup:
        """The baseline's setup."""
        return self._search.base.setup

    @property
    def base_runner(self) -> Any:
        """The baseline's runner (its warm-up loss, its outputs)."""
        return self._search.base

    @property
    def best(self) -> BestSoFar:
        return self._search.best

    @property
    def settings(self) -> SearchSettings:
        return self._search.settings

    @property
    def mode(self) -> Mode:
        return self._search.workload.mode

    def note(self, text: str) -> None:
        """Add a line to the result's notes, once."""
        if text not in self._search.notes:
            self._search.notes.append(text)
