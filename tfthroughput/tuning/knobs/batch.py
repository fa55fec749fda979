"""The batch size, in either mode: larger batches doubled while they gain, within the data, the
mode's largest factor and the latency limit.

Training tries 2x and 4x the given batch, and only where allowed (a larger batch changes the
learning dynamics); inference goes up to 128x (a larger ``predict`` batch changes the outputs
by rounding only, checked at the output tolerance, and adds to each batch's wait).
"""

from __future__ import annotations

from typing import Any

from tfthroughput.tuning.engine.contract import Proposal, SearchView
from tfthroughput.tuning.engine.verdict import OVER_LATENCY
from tfthroughput.tuning.knobs.lines import Line, doublings, walk_along


def batch_knob(view: SearchView) -> Line:
    """The batch size doubled from twice the given one while it gains."""
    mode, data = view.mode, view.mode.data
    if data.batch_note:
        view.note(data.batch_note)
        return 1.0
    given = data.batch_size
    bound = given * mode.most_batch_factor
    if data.examples is not None and data.examples < bound:
        bound = data.examples
        view.note(f"batch size bounded by the {bound} examples in the data")
    limit = mode.latency_limit_ms
    p95 = None if limit is None else mode.baseline_p95_ms()
    if p95 is not None and p95 > limit:
        view.note(
            f"batch size not raised: the given batch's p95 latency ({p95:.2f} ms) already "
            f"exceeds the limit ({limit:g} ms)"
        )
        return 1.0

    def ends(trial: Any) -> bool:
        if trial.status == OVER_LATENCY:
            view.note(
                f"batch size bounded by the latency limit: {trial.setup.batch_size} takes "
                f"{trial.latency_p95_ms:.2f} ms per batch (p95), over {limit:g} ms"
            )
        return trial.status in mode.line_ends

    def proposal_at(size: int) -> Proposal:
        return Proposal(view.best.setup.with_(batch_size=size))

    return (yield from walk_along(doublings(given * 2, bound), proposal_at, ends))
