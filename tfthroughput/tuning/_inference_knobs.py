"""The knobs the inference search tries, in order (:func:`inference_knobs`): the batch line,
XLA flipped, the ``steps_per_execution`` line, the policy. A trial joins the best setup only by
beating it by the noise floor (3 %), so a knob that gains nothing measurable is not added. Why
each: below and in ``docs/tuning.md`` ("Inference").
"""

from __future__ import annotations

from typing import Any

from tfthroughput.tuning._arguments import ARRAYS, BATCHED
from tfthroughput.tuning._engine import Search
from tfthroughput.tuning._knobs import Knob, double_along, policy_knob
from tfthroughput.tuning._status import FAILED, OUTPUTS_DIFFER, OVER_LATENCY

LATENCY_SAMPLES = 5  # single-batch calls per runner per round
_MAX_BATCH_FACTOR = 128  # the largest batch tried, times the given one
_ENDS_AN_INFERENCE_LINE = (FAILED, OUTPUTS_DIFFER, OVER_LATENCY)


def inference_knobs(settings: Any) -> tuple[Knob, ...]:
    """The knobs the inference search tries, in order, as its settings allow."""
    knobs: list[Knob] = [inference_batch_line]
    if settings.try_xla:
        knobs.append(xla_knob)
    return (*knobs, inference_steps_per_execution_line, policy_knob)


def inference_batch_line(search: Search) -> None:
    """The batch size doubled while it gains, within the data and the latency limit."""
    data, notes = search.workload.data, search.notes
    if data.kind == BATCHED:
        notes.append(
            "batch size not tried: the dataset is already batched (pass it unbatched, "
            "with batch_size, to let tune try larger batches)"
        )
        return
    given = data.batch_size
    bound = given * _MAX_BATCH_FACTOR
    if data.kind == ARRAYS and data.examples < bound:
        bound = data.examples
        notes.append(f"batch size bounded by the {bound} examples in the data")
    limit = search.settings.max_batch_latency_ms
    if limit is not None:
        search.base.sample_latency(LATENCY_SAMPLES)
        if search.base.latency_ms(0.95) > limit:
            notes.append(
                f"batch size not raised: the given batch's p95 latency "
                f"({search.base.latency_ms(0.95):.2f} ms) already exceeds the limit "
                f"({limit:g} ms)"
            )
            return

    def ends(trial: Any) -> bool:
        if trial.status == OVER_LATENCY:
            notes.append(
                f"batch size bounded by the latency limit: {trial.setup.batch_size} takes "
                f"{trial.latency_p95_ms:.2f} ms per batch (p95), over {limit:g} ms"
            )
        return trial.status in _ENDS_AN_INFERENCE_LINE

    double_along(
        given * 2, bound, lambda size: search.try_setup(search.best[0].with_(batch_size=size)), ends
    )


def xla_knob(search: Search) -> None:
    """XLA flipped on the best setup so far."""
    best = search.best[0]
    search.try_setup(best.with_(jit_compile=not best.jit_compile))


def inference_steps_per_execution_line(search: Search) -> None:
    """``steps_per_execution`` doubled from twice the model's own, up to the smallest power of
    two that runs one ``predict`` call on the arrays in one execution (a call of 5 batches: 8):
    the user's call is what it groups, and a value past that call's batches changes nothing
    in it. For a dataset of unknown size, up to half the batches of the search's timed run."""
    current, given = search.best[0], search.base_setup.steps_per_execution
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
        lambda trial: trial.status in _ENDS_AN_INFERENCE_LINE,
        line_best=search.best_ratio,
    )
