"""The batch size, in either mode: larger batches, while the data holds them.

Training tries 2x and 4x the given batch, and only where allowed (a larger batch changes the
learning dynamics); inference doubles the batch while it gains, within the data and the
latency limit (a larger ``predict`` batch changes the outputs by rounding only, checked at
the output tolerance, and adds to each batch's wait).
"""

from __future__ import annotations

from typing import Any

import keras

from tfthroughput.tuning._arguments import ARRAYS, BATCHED
from tfthroughput.tuning.engine.search import Search
from tfthroughput.tuning.engine.verdict import FAILED, OVER_LATENCY
from tfthroughput.tuning.knobs.lines import ENDS_AN_INFERENCE_LINE, double_along

LATENCY_SAMPLES = 5  # single-batch calls per runner per round
_MAX_BATCH_FACTOR = 128  # the largest batch tried in inference, times the given one
_BATCH_FACTORS = (2, 4)  # batches tried in training, times the given one


def training_batch_knob(search: Search) -> None:
    """Batches 2x and 4x the given one, while the data holds them and they run."""
    data = search.workload.data
    if data.kind == BATCHED:
        search.notes.append("batch size not tried: the dataset is already batched")
        return
    for factor in _BATCH_FACTORS:
        size = data.batch_size * factor
        if data.kind == ARRAYS and size > len(keras.tree.flatten(data.value[0])[0]):
            return
        trial = search.try_setup(search.best.setup.with_(batch_size=size), same_arithmetic=False)
        if trial is None or trial.status == FAILED:
            return


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
        return trial.status in ENDS_AN_INFERENCE_LINE

    double_along(
        given * 2,
        bound,
        lambda size: search.try_setup(search.best.setup.with_(batch_size=size)),
        ends,
    )
