"""``steps_per_execution``, in either mode: a line of values doubled while it gains.

Training's line runs under the model's own XLA setting, then XLA flipped around that line's
best, and once more on a new best that a cheaper policy or the rebuilt pipeline made
(:func:`line_again_on_a_new_best`); every value must divide the user's epoch. Inference's line
runs up to the batches of one ``predict`` call.

Keras runs whole executions: a value that does not divide ``steps_per_epoch`` silently trains
more steps than asked (``steps_per_epoch=6`` at ``steps_per_execution=4`` trains 8), so only
values that divide it are tried where it is given; an epoch that ends with the data needs no
such care (Keras stops at the data's end).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfthroughput._validation import check_positive_int
from tfthroughput.tuning.engine.search import Search
from tfthroughput.tuning.engine.verdict import FAILED
from tfthroughput.tuning.knobs.lines import (
    ENDS_AN_INFERENCE_LINE,
    double_along,
    doublings,
    gains,
    halvings,
    walk_along,
)
from tfthroughput.tuning.setup import TuneSetup


def training_steps_per_execution_lines(search: Search) -> None:
    """The line under the model's own XLA setting, then XLA flipped around that line's best."""
    current, given = search.best.setup, search.base_setup.steps_per_execution
    _training_steps_per_execution_line(search, current.jit_compile, start=given * 2)
    if search.settings.try_xla:
        _flipped_xla_around_the_best(search, not current.jit_compile)


def line_again_on_a_new_best(search: Search, before: TuneSetup) -> None:
    """Where the knob just tried made a new best (a cheaper policy, the rebuilt pipeline),
    ``steps_per_execution`` once more on it, from the best's value doubled: with the step's
    own cost cut, the fixed cost of a call is a larger share, and a line that stopped within
    the noise can gain."""
    best = search.best.setup
    if best != before:
        start = best.steps_per_execution * 2
        _training_steps_per_execution_line(search, best.jit_compile, start=start)


def _training_steps_per_execution_line(search: Search, jit: bool, start: int) -> None:
    current = search.best.setup
    double_along(
        start,
        _training_spe_bound(search),
        _training_spe_trial(search, current, jit),
        lambda trial: trial.status == FAILED,
        line_best=search.best_ratio if jit == current.jit_compile else 1.0,
    )


def _flipped_xla_around_the_best(search: Search, jit: bool) -> None:
    """XLA flipped at the best ``steps_per_execution`` so far, then doubled up from it and
    halved down from it (down to the model's own) while it gains over the best setup: each
    row from that value ends after two values in a row without a gain, the first one counted.

    Searched apart from the first line because XLA can help at one value and hurt at another,
    and around that line's best because a whole second line from the model's own value spends
    most of the search's time below it (measured: docs/tuning.md, "Why the search is shaped
    so").
    """
    current = search.best.setup
    value, try_at = current.steps_per_execution, _training_spe_trial(search, current, jit)
    line_best = search.best_ratio
    trial = try_at(value)
    if trial is None or trial.status == FAILED:
        return
    missed = 0 if gains(trial, line_best) else 1  # the first value of each row
    if not missed:
        line_best = trial.ratio
    ends = lambda trial: trial.status == FAILED  # noqa: E731
    up = doublings(value * 2, _training_spe_bound(search))
    line_best = walk_along(up, try_at, ends, line_best=line_best, misses=missed)
    down = halvings(value // 2, search.base_setup.steps_per_execution)
    walk_along(down, try_at, ends, line_best=line_best, misses=missed)


def _training_spe_bound(search: Search) -> int:
    return min(search.settings.max_steps_per_execution, search.workload.steps)


def _training_spe_trial(search: Search, current: Any, jit: bool) -> Callable[[int], Any]:
    """A trial of ``current`` at a ``steps_per_execution`` under ``jit``: ``None`` (the line
    ends) at a value that does not divide the epoch, noted once."""
    epoch = search.settings.epoch_steps

    def try_at(spe: int):
        if not divides(spe, epoch):
            note = f"steps_per_execution={spe} and above not tried: they do not divide the epoch"
            if note not in search.notes:
                search.notes.append(note + f" ({epoch} steps)")
            return None
        return search.try_setup(current.with_(steps_per_execution=spe, jit_compile=jit))

    return try_at


def inference_steps_per_execution_line(search: Search) -> None:
    """``steps_per_execution`` doubled from twice the model's own, up to the smallest power of
    two that runs one ``predict`` call on the arrays in one execution (a call of 5 batches: 8):
    the user's call is what it groups, and a value past that call's batches changes nothing
    in it. For a dataset of unknown size, up to half the batches of the search's timed run."""
    current, given = search.best.setup, search.base_setup.steps_per_execution
    examples, size = search.workload.data.examples, current.batch_size
    if examples is None or size is None:
        bound = max(1, search.workload.timed_batches(search, current) // 2)
    else:
        batches = -(-examples // size)
        bound = 1 << (batches - 1).bit_length()
        if bound < given * 2:
            search.notes.append(
                f"steps_per_execution above {given} not tried: one predict call on the "
                f"{examples} examples is {batches} batch{'es' if batches > 1 else ''} of {size}"
            )
            return
    double_along(
        given * 2,
        min(search.settings.max_steps_per_execution, bound),
        lambda value: search.try_setup(current.with_(steps_per_execution=value)),
        lambda trial: trial.status in ENDS_AN_INFERENCE_LINE,
        line_best=search.best_ratio,
    )


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
