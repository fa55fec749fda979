"""``steps_per_execution``, in either mode: a line of values doubled while it gains, up to the
mode's bound (training: the warm-up's steps; inference: the batches of one ``predict`` call).

Training then flips XLA around that line's best (:func:`xla_around_the_best`), and runs the
line once more on a new best that a cheaper policy or the rebuilt pipeline made
(:func:`line_again_on_a_new_best`).

Keras runs whole executions: a value that does not divide ``steps_per_epoch`` silently trains
more steps than asked (``steps_per_epoch=6`` at ``steps_per_execution=4`` trains 8), so only
values that divide it are tried where it is given; an epoch that ends with the data needs no
such care (Keras stops at the data's end).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfthroughput._validation import check_positive_int
from tfthroughput.tuning.engine.contract import Knob, Proposal, SearchView
from tfthroughput.tuning.engine.verdict import FAILED
from tfthroughput.tuning.knobs.lines import Line, doublings, gains, halvings, walk_along
from tfthroughput.tuning.setup import TuneSetup


def steps_per_execution_line(view: SearchView, start: int | None = None) -> Line:
    """``steps_per_execution`` on the best setup so far, doubled from ``start`` (by default
    twice the given value) while it gains."""
    current = view.best.setup
    start = start or view.base.steps_per_execution * 2
    bound, why_not = view.mode.steps_per_execution_bound(current)
    if bound < start:
        if why_not:
            view.note(why_not)
        return view.best.ratio
    return (
        yield from walk_along(
            doublings(start, min(view.settings.max_steps_per_execution, bound)),
            _proposal_at(view, current),
            _ends(view),
            line_best=view.best.ratio,
        )
    )


def xla_around_the_best(view: SearchView) -> Line:
    """XLA flipped at the best ``steps_per_execution`` so far, then doubled up from it and
    halved down from it (down to the model's own) while it gains over the best setup: each
    row from that value ends after two values in a row without a gain, the first one counted.

    Apart from the first line because XLA can help at one value and hurt at another, and
    around that line's best because a whole second line from the model's own value spends
    most of the search's time below it (docs/tuning.md, "Why the search is shaped so")."""
    if not view.settings.try_xla:
        return 1.0
    current = view.best.setup
    flipped = current.with_(jit_compile=not current.jit_compile)
    value, line_best = current.steps_per_execution, view.best.ratio
    trial = yield Proposal(flipped)
    if trial is None or trial.status == FAILED:
        return line_best
    missed = 0 if gains(trial, line_best) else 1  # the first value of each row
    if not missed:
        line_best = trial.ratio
    proposal_at, ends = _proposal_at(view, flipped), _ends(view)
    bound, _ = view.mode.steps_per_execution_bound(flipped)
    up = doublings(value * 2, min(view.settings.max_steps_per_execution, bound))
    line_best = yield from walk_along(up, proposal_at, ends, line_best=line_best, misses=missed)
    down = halvings(value // 2, view.base.steps_per_execution)
    return (yield from walk_along(down, proposal_at, ends, line_best=line_best, misses=missed))


def line_again_on_a_new_best(knob: Knob) -> Knob:
    """``knob``, then, where it made a new best (a cheaper policy, the rebuilt pipeline),
    ``steps_per_execution`` once more on it from the best's value doubled: with the step's own
    cost cut, the fixed cost of a call is a larger share, and a line that stopped within the
    noise can gain."""

    def knob_then_line(view: SearchView) -> Line:
        before = view.best.setup
        yield from knob(view)
        best = view.best.setup
        if best != before:
            yield from steps_per_execution_line(view, start=best.steps_per_execution * 2)
        return view.best.ratio

    knob_then_line.__name__ = f"{knob.__name__}_then_line"
    return knob_then_line


def _proposal_at(view: SearchView, current: TuneSetup) -> Callable[[int], Proposal | None]:
    """The proposal of ``current`` at a value; ``None`` (the line ends) at a value that does
    not divide the epoch, noted once."""
    epoch = view.mode.epoch_steps

    def proposal_at(value: int) -> Proposal | None:
        if not divides(value, epoch):
            view.note(
                f"steps_per_execution={value} and above not tried: they do not divide the "
                f"epoch ({epoch} steps)"
            )
            return None
        return Proposal(current.with_(steps_per_execution=value))

    return proposal_at


def _ends(view: SearchView) -> Callable[[Any], bool]:
    return lambda trial: trial.status in view.mode.line_ends


def epoch_steps(steps_per_epoch: object, notes: list[str]) -> int | None:
    """``steps_per_epoch`` as checked, with a note when it is given (``None`` when not).

    Raises:
        TypeError: If ``steps_per_epoch`` is not an int or None.
        ValueError: If it is not positive.

    Example:
        >>> notes = []
        >>> epoch_steps(100, notes), notes[0][:45]
        (100, 'steps_per_execution divides the epoch (100 st')
        >>> epoch_steps(None, [])
    """
    given = check_positive_int("steps_per_epoch", steps_per_epoch, allow_none=True)
    if given is not None:
        notes.append(
            f"steps_per_execution divides the epoch ({given} steps, steps_per_epoch): Keras "
            "runs whole executions, so a value that does not divide it trains more steps than "
            "asked"
        )
    return given


def divides(steps_per_execution: int, epoch: int | None) -> bool:
    """Whether ``steps_per_execution`` keeps the epoch at the steps asked for.

    Example:
        >>> divides(8, 100), divides(4, 100), divides(64, None)
        (False, True, True)
    """
    return epoch is None or epoch % steps_per_execution == 0
