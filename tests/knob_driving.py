"""Drives one of tune's knobs (tuning/knobs/) by hand: a knob is a generator of proposals, sent
here the trials a known speed table gives, with a read-only view of a fake search whose best
moves as the engine's. No model, no engine: what a knob proposes, in which order, and when
it stops. Also drives a workload's judgement that asks for runners first (``judged``)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from tfthroughput.tuning.engine.contract import BestSoFar, Mode, Proposal, SearchSettings
from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.engine.verdict import FAILED, FASTER, NOT_FASTER
from tfthroughput.tuning.setup import TuneSetup

GIVEN = TuneSetup(1, False, "float32", batch_size=16)


@dataclass(frozen=True)
class Trial:
    setup: TuneSetup
    status: str
    ratio: float
    latency_p95_ms: float | None = None


@dataclass(frozen=True)
class Comparison:
    ratio: float


@dataclass(frozen=True)
class Data:
    batch_size: int | None = 16
    examples: int | None = None
    batch_note: str | None = None


class View:
    """The read-only view a knob gets, over a fake search whose best moves as the engine's."""

    def __init__(
        self, *, data=None, policy=None, try_xla=True, epoch=None, bound=1024, ends=(), **mode
    ):
        self.base, self.best, self.notes = GIVEN, BestSoFar(GIVEN), []
        self.settings = SearchSettings(
            steps=128,
            rounds=3,
            time_budget=60.0,
            seed=0,
            max_steps_per_execution=1024,
            policy=policy,
            try_xla=try_xla,
            notes=(),
        )
        self.mode = Mode(
            data=data or Data(),
            line_ends=frozenset({FAILED, *ends}),
            most_batch_factor=mode.pop("most_batch_factor", 4),
            steps_per_execution_bound=lambda setup: (bound, ""),
            epoch_steps=epoch,
            **mode,
        )

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)


def drive(knob, view, speed, *, budget=None):
    """Run ``knob`` to its end: each proposal's trial from ``speed(setup)`` (a ratio, or a
    status), the best moved as the engine moves it; the setups proposed, in order."""
    proposed, proposals, trial = [], knob(view), None
    while True:
        try:
            proposal = proposals.send(trial)
        except StopIteration:
            return proposed
        proposed.append(proposal.setup)
        if budget is not None and len(proposed) > budget:
            trial = None
            continue
        found = speed(proposal.setup)
        if isinstance(found, str):
            trial = Trial(proposal.setup, found, 1.0, latency_p95_ms=9.0)
        else:
            status = FASTER if found > 1.03 else NOT_FASTER
            trial = Trial(proposal.setup, status, found)
            if status == FASTER and found > view.best.ratio:
                view.best = BestSoFar(proposal.setup, Comparison(found))


def spe(*values, jit=False, **changes):
    return [GIVEN.with_(steps_per_execution=v, jit_compile=jit, **changes) for v in values]


def proposal(value):
    """The given setup at ``steps_per_execution=value``, proposed."""
    return Proposal(GIVEN.with_(steps_per_execution=value))


def judged(judgement):
    """The trial a workload's ``judge`` gave, starting each runner it asked for first and
    sending back whether it started, as the search does."""
    if not inspect.isgenerator(judgement):
        return judgement
    started = None
    while True:
        try:
            runner = judgement.send(started)
        except StopIteration as done:
            return done.value
        try:
            runner.start()
            started = True
        except TrialFailed:
            started = False
