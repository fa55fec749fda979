"""The confirmation: the search's pick timed the way the user runs it, for the headline figure.

The search times short runs of warmed-up models, which lets it try many setups in its budget;
the user runs whole ``fit`` epochs (callbacks included) and whole ``predict`` calls (set-up
included), where a gain can shrink or vanish (docs/tuning.md, "The confirmation"). So the
baseline, the pick and up to two rivals (:func:`contenders`) are rebuilt, each warmed up by one
untimed piece of that work, then timed by it in rotated rounds
(:func:`~tfthroughput.tuning.engine.measure.compare_together`), each judged against the
baseline by the search's paired rule (``engine.paired``), rounds added up to twice ``rounds``
until every verdict settles. Of those shown faster, the pick is chosen unless a rival beats it
round by round by the same rule; if none is faster, the baseline is kept, and one line says
which. What a piece of work is belongs to the workload; the rule lives here once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tfthroughput.tuning._table import paired_figure
from tfthroughput.tuning.engine.measure import Comparison, compare_together
from tfthroughput.tuning.engine.paired import FASTER as PAIRED_FASTER
from tfthroughput.tuning.engine.paired import paired_ratio
from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.engine.verdict import FASTER
from tfthroughput.tuning.setup import TuneSetup

CONFIRM_ROUNDS = 5  # the default: a verdict that rests on most of 5 rounds, not on 2 of 3
# Share of the search's time the timed runs aim at (warm-ups on top): whole pieces of work
# where they fit, else a part of each, said in the work's description.
CONFIRM_SHARE = 0.15  # measured against 0.2: docs/tuning.md, "Why the search is shaped so"
# Most rounds, as a multiple of the rounds asked for: the paired rule adds rounds until each
# verdict settles (``engine.paired.settled``); the pieces of work are sized for ``rounds``.
CONFIRM_CAP = 2


@dataclass(frozen=True)
class Confirmation:
    """The chosen setup against the baseline, timed as the user runs it.

    Attributes:
        pick: The search's pick (its highest median ratio), confirmed first.
        setup: The confirmed setup: the search's pick where it is faster than the baseline
            beyond the noise and no rival beats it round by round, else the faster rival
            kept by that rule, else the baseline.
        label: What it changes from the baseline (``"the baseline"`` when kept).
        work: One timed piece of work, e.g. ``"whole fit epochs (128 steps)"``.
        rounds: Rounds run, each timing every side once in rotated order.
        seconds: Wall-clock seconds the confirmation took (builds and warm-ups included).
        ratio: Median ratio of its examples/s to the baseline's (``1.0`` when kept).
        ratio_low: Low end of the median's sign-test interval; ``None`` when the baseline is
            kept.
        ratio_high: Its high end; ``None`` when the baseline is kept.
        noise: The interval's half-width relative to the median; ``None`` when the baseline
            is kept.
        rounds_won: Rounds in which it beat the baseline; ``None`` when the baseline is kept.
        examples_per_second: Its median examples/s by that work.
        baseline_examples_per_second: The baseline's median examples/s by that work.
        outcome: One line where the pick was not confirmed (what was tried, what is kept);
            ``""`` when it was.
    """

    pick: TuneSetup
    setup: TuneSetup
    label: str
    work: str
    rounds: int
    seconds: float
    ratio: float = 1.0
    ratio_low: float | None = None
    ratio_high: float | None = None
    noise: float | None = None
    rounds_won: int | None = None
    examples_per_second: float | None = None
    baseline_examples_per_second: float | None = None
    outcome: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The confirmation as plain JSON-able values."""
        return {**vars(self), "pick": vars(self.pick), "setup": vars(self.setup)}


def picks(trials: Sequence[Any], chosen: TuneSetup, baseline: TuneSetup) -> list[tuple[Any, str]]:
    """The setups to confirm, best first: the search's pick, then its other faster setups by
    median ratio, each once, as ``(setup, label)``; those that differ from the pick in more
    than ``steps_per_execution`` come before those that do not.

    A neighbour on the pick's ``steps_per_execution`` line is judged by the search's runs as
    the user's work judges it; a different input pipeline, policy or batch size is not (the
    search's short runs each start their input afresh, which a rebuilt pipeline that repeats
    spares the user's epochs; a policy or a batch costs in a whole call's set-up), so the
    confirmation's second place goes to such a setup where one was faster."""

    faster = sorted(
        (t for t in trials if t.status == FASTER and t.setup != baseline),
        key=lambda t: (t.setup != chosen, _on_line(t.setup, chosen), -(t.ratio or 0.0)),
    )
    seen, found = set(), []
    for trial in faster:
        if trial.setup not in seen:
            seen.add(trial.setup)
            found.append((trial.setup, trial.label))
    return found


def _on_line(setup: TuneSetup, pick: TuneSetup) -> bool:
    """Whether ``setup`` is ``pick`` but for ``steps_per_execution``."""
    return setup.with_(steps_per_execution=pick.steps_per_execution) == pick


def contenders(candidates: Sequence[tuple[TuneSetup, str]], baseline: TuneSetup) -> list:
    """The candidates the confirmation times: the search's pick, the next-best, and where those
    two keep the same input pipeline and a faster setup off the pick's line changes it (or the
    other way round), the best such one that undoes what the search misjudges: it rebuilds the
    pipeline the pick keeps (the search's runs each restart it, so it reads low there), or it
    takes back a policy, XLA or batch size the pick changed (a whole call's set-up, which the
    search's warm runs skip, can cost what they gained)."""
    timed = list(candidates[:2])
    if len(timed) < 2:
        return timed
    pick, rival = timed[0][0], timed[1][0]

    def undoes_a_misjudged_knob(setup: TuneSetup) -> bool:
        if setup.pipeline and not pick.pipeline:
            return True
        knobs = ("policy", "jit_compile", "batch_size")
        return any(
            getattr(pick, knob) != getattr(baseline, knob)
            and getattr(setup, knob) == getattr(baseline, knob)
            for knob in knobs
        )

    rebuilt_apart = rival.pipeline != pick.pipeline
    for setup, label in candidates[2:]:
        splits = (setup.pipeline != pick.pipeline) != rebuilt_apart
        if not _on_line(setup, pick) and splits and undoes_a_misjudged_knob(setup):
            return [*timed, (setup, label)]
    return timed


def confirm(
    runner_for: Callable[[TuneSetup], Any],
    baseline: TuneSetup,
    candidates: Sequence[tuple[TuneSetup, str]],
    *,
    rounds: int,
    clock: Callable[[], float],
    work: str,
) -> Confirmation:
    """Time the baseline, the search's pick and its rivals (:func:`contenders`) in the same
    rounds by ``work``; of those faster than the baseline beyond the noise, the pick is chosen
    unless a rival beats it round by round by the same paired rule (and a later rival the one
    kept so far).

    Args:
        runner_for: A setup's runner, not yet started (a :class:`WholeRuns`): ``start()``
            builds and warms it up, then ``run()`` times one piece of work (``steps *
            examples_per_step`` examples), ``close()``; either of the first two may raise
            :class:`~tfthroughput.tuning.engine.trial_model.TrialFailed`. Each runner is
            started here, not inside ``runner_for``: a frame fewer above the user's ``fit``.
        baseline: The setup as given.
        candidates: ``(setup, label)`` pairs, best first (:func:`picks`).
        rounds: Rounds, each timing every side once, in rotated order.
        clock: Seconds clock.
        work: What one piece of work is, for the table.
    """
    begin = clock()
    pick = candidates[0][0]
    kept = {"pick": pick, "setup": baseline, "label": "the baseline", "work": work}
    kept["rounds"] = rounds
    try:
        base = runner_for(baseline)
        base.start()
    except TrialFailed as error:
        why = f"confirmation: the baseline failed by {work} ({error}): the baseline is kept"
        return Confirmation(**kept, seconds=clock() - begin, outcome=why)
    timed = contenders(candidates, baseline)
    found: list[Comparison | TrialFailed | None] = [None] * len(timed)
    running: dict[int, Any] = {}  # the runners still open

    def dropped(runner: Any) -> None:  # failed in the rounds: its memory back at once
        running.pop(next(i for i, open_one in running.items() if open_one is runner)).close()

    try:
        for index, (setup, _) in enumerate(timed):
            try:
                runner = runner_for(setup)
                runner.start()
            except TrialFailed as error:
                found[index] = error
                continue
            running[index] = runner
        started = list(running)
        compared = compare_together(
            base, list(running.values()), rounds, cap=CONFIRM_CAP * rounds, dropped=dropped
        )
        for index, result in zip(started, compared, strict=True):
            found[index] = result
    finally:
        for runner in running.values():
            runner.close()
        base.close()
    kept["seconds"] = clock() - begin
    return _decided(found, timed, kept)


def _decided(
    found: list[Comparison | TrialFailed], timed: list[tuple[TuneSetup, str]], kept: dict
) -> Confirmation:
    """The confirmation from each contender's comparison or failure (``timed``'s order): the
    pick where it is faster, else the first rival that is, unless a later rival beats it
    round by round; else the baseline, as ``kept`` holds it."""
    run = [result.rounds for result in found if isinstance(result, Comparison)]
    kept["rounds"] = max(run, default=kept["rounds"])
    faster = [index for index, result in enumerate(found) if _is_faster(result)]
    names = ["the search's pick", "the next-best"]
    if len(timed) > 2:
        names.append(
            f"the best with the pipeline {'rebuilt' if timed[2][0].pipeline else 'as given'}"
        )
    said = [
        f"{name}, {label}, {_verdict(result)}"
        for name, (_, label), result in zip(names, timed, found, strict=False)
    ]
    if not faster:
        return Confirmation(
            **kept, outcome=f"confirmation: {'; '.join(said)}: the baseline is kept"
        )
    chosen = faster[0]
    for index in faster[1:]:
        if _beats(found[index], found[chosen]):
            chosen = index
    setup, label = timed[chosen]
    outcome = "" if chosen == 0 else f"confirmation: {'; '.join(said)}: {label} is chosen"
    return Confirmation(
        kept["pick"],
        setup,
        label,
        kept["work"],
        kept["rounds"],
        kept["seconds"],
        **_figures(found[chosen]),
        outcome=outcome,
    )


def _beats(contender: Comparison, other: Comparison) -> bool:
    """Whether ``contender`` is faster than ``other`` by the paired rule, round by round (both
    were timed in the same rounds): a higher median ratio alone would often be the luckier of
    two noisy figures, a setup the user's own runs then find slower."""
    rounds = zip(contender.speeds, other.speeds, strict=True)
    return paired_ratio([mine / theirs for mine, theirs in rounds]).verdict == PAIRED_FASTER


def _is_faster(found: Comparison | TrialFailed) -> bool:
    return isinstance(found, Comparison) and found.faster


def _verdict(found: Comparison | TrialFailed) -> str:
    if isinstance(found, TrialFailed):
        return f"failed ({found})"
    said = f"was {paired_figure(found)}, {found.rounds_won} of {found.rounds} rounds won"
    verdict = found.verdict
    return said if verdict == "faster" else f"{said}, {verdict}"


def _figures(found: Comparison) -> dict[str, Any]:
    return {
        "ratio": found.ratio,
        "ratio_low": found.ratio_low,
        "ratio_high": found.ratio_high,
        "noise": found.noise,
        "rounds_won": found.rounds_won,
        "examples_per_second": found.examples_per_second,
        "baseline_examples_per_second": found.baseline_examples_per_second,
    }


def run_examples(
    base_examples_per_second: float,
    search_seconds: float,
    rounds: int,
    ratios: Sequence[float] = (1.0,),
) -> float:
    """Examples one timed piece of work may hold so that the rounds (and one warm-up each) of
    the baseline and the contenders take about :data:`CONFIRM_SHARE` of the search's time, at
    the speeds the search measured: the baseline's examples/s and each contender's ``ratios``
    to it (a contender at 20x takes a twentieth of the baseline's time; at 1x or less, as
    long). A cut piece of a ``predict`` call pays the call's set-up on fewer examples, so the
    pieces are made as long as the share allows.

    Example:
        >>> run_examples(1000.0, 80.0, 5)  # 12 runs in 12 s: 1 s, 1,000 examples, each
        1000.0
        >>> run_examples(1000.0, 80.0, 5, ratios=(4.0, 4.0))  # the baseline's 6 runs: 1.33 s
        1333.3333333333333
    """
    time_per_example = (1.0 + sum(1.0 / max(ratio, 1.0) for ratio in ratios)) / (
        base_examples_per_second
    )
    return CONFIRM_SHARE * search_seconds / ((rounds + 1) * time_per_example)


def _as_timed(confirmation: Confirmation) -> Confirmation:
    return confirmation


class ConfirmationPlan(NamedTuple):
    """What a mode's confirmation times (the search calls :func:`confirm` with it).

    Attributes:
        runner_for: Makes a setup's runner, unstarted (see :func:`confirm`).
        work: What one piece of work is, for the table.
        finish: The confirmation in its final form, once timed (inference names the examples
            its calls held, known only once a runner has started).
    """

    runner_for: Callable[[TuneSetup], Any]
    work: str
    finish: Callable[[Confirmation], Confirmation] = _as_timed


class WholeRuns:
    """A runner seen by :func:`compare` as one step of ``examples`` per run.

    Args:
        runner: A runner, not yet started (closed with this one).
        examples: Examples in one piece of work (``start`` may set it).
        run: Times one piece of work; defaults to ``runner.run``.
        start: Starts it; defaults to ``runner.start``.
    """

    steps = 1

    def __init__(
        self,
        runner: Any,
        examples: int,
        run: Callable[[], float] | None = None,
        start: Callable[[], None] | None = None,
    ) -> None:
        self.examples_per_step = examples
        # The runner's own methods, not wrappers: the user's fit sits a frame nearer ``tune``.
        self.start, self.run = start or runner.start, run or runner.run
        self.rewarm, self.close = runner.rewarm, runner.close
