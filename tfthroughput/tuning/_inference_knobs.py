"""The order in which ``tune(..., mode="inference")`` tries the knobs of ``predict``.

1. The baseline: ``predict`` exactly as given (its batch size, default 32).
2. The batch size, doubling (free at inference: no learning dynamics), each measured
   with the same examples per timed run. The line stops at a failure (out of memory), at
   the first batch whose p95 latency exceeds ``max_batch_latency_ms``, at outputs beyond the
   tolerance, at the examples available or 128x the given batch, or after two doublings in
   a row that gain less than the noise floor (3 %) over the line's best.
3. XLA flipped (``jit_compile`` the other way), on the best setup so far.
4. ``steps_per_execution``, doubling from twice the model's own, on the best so far.
5. The dtype policy ``recommend_precision`` recommends, if it is not the one in force.

A trial is ``"faster"`` by the baseline's rule (its median ratio to the baseline beyond the
noise, most rounds won); it becomes the best setup only if its ratio also beats the best
so far by the noise floor (3 %), so a knob that gains nothing measurable is not added.

Each trial is measured against the baseline in alternated rounds (the tuning room's
``compare``); before each round both take a few single-batch latency samples. Its outputs are
compared with the baseline's, or, where it only adds ``steps_per_execution`` to the best setup
so far, exactly with that setup's (``_inference_workload``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfthroughput.tuning._arguments import ARRAYS, BATCHED
from tfthroughput.tuning._engine import Search, policy_knob
from tfthroughput.tuning._knob_line import double_along
from tfthroughput.tuning._status import FAILED, OUTPUTS_DIFFER, OVER_LATENCY

LATENCY_SAMPLES = 5  # single-batch calls per runner per round
_MAX_BATCH_FACTOR = 128
_ENDS_A_LINE = (FAILED, OUTPUTS_DIFFER, OVER_LATENCY)
Knob = Callable[[Search], None]


def inference_knobs(settings: Any) -> tuple[Knob, ...]:
    """The knobs the inference search tries, in order, as its settings allow."""
    knobs: list[Knob] = [batch_line]
    if settings.try_xla:
        knobs.append(xla_knob)
    return (*knobs, steps_per_execution_line, policy_knob)


def batch_line(search: Search) -> None:
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
        return trial.status in _ENDS_A_LINE

    double_along(
        given * 2, bound, lambda size: search.try_setup(search.best[0].with_(batch_size=size)), ends
    )


def xla_knob(search: Search) -> None:
    """XLA flipped on the best setup so far."""
    best = search.best[0]
    search.try_setup(best.with_(jit_compile=not best.jit_compile))


def steps_per_execution_line(search: Search) -> None:
    """``steps_per_execution`` doubled from twice the model's own, at most half the timed
    run's batches."""
    current = search.best[0]
    batches = search.workload.timed_batches(search, current)
    bound = min(search.settings.max_steps_per_execution, max(1, batches // 2))
    double_along(
        search.base_setup.steps_per_execution * 2,
        bound,
        lambda value: search.try_setup(current.with_(steps_per_execution=value)),
        lambda trial: trial.status in _ENDS_A_LINE,
        line_best=search.best[1].ratio if search.best[1] else 1.0,
    )
