"""tuning/knobs/batch.py: the batch size raised within the data and the latency limit, driven by
hand (tests/knob_driving.py)."""

from __future__ import annotations

from knob_driving import Data, View, drive

from tfthroughput.tuning.engine.verdict import OVER_LATENCY
from tfthroughput.tuning.knobs.batch import batch_knob


def test_the_batch_knob_says_why_it_tries_nothing_and_stays_within_the_data():
    view = View(data=Data(batch_size=None, batch_note="batch size not tried: already batched"))
    assert drive(batch_knob, view, lambda s: 2.0) == []
    assert view.notes == ["batch size not tried: already batched"]
    view = View(data=Data(examples=48))
    proposed = drive(batch_knob, view, lambda s: s.batch_size / 16)
    assert [s.batch_size for s in proposed] == [32]  # 64 is past the 48 examples
    assert view.notes == ["batch size bounded by the 48 examples in the data"]


def test_the_batch_knob_stops_at_the_latency_limit_or_before_it_where_the_given_batch_is_over():
    view = View(
        most_batch_factor=128,
        latency_limit_ms=2.0,
        baseline_p95_ms=lambda: 1.0,
        ends=(OVER_LATENCY,),
    )
    speeds = lambda s: OVER_LATENCY if s.batch_size >= 128 else s.batch_size / 16  # noqa: E731
    assert [s.batch_size for s in drive(batch_knob, view, speeds)] == [32, 64, 128]
    assert view.notes == [
        "batch size bounded by the latency limit: 128 takes 9.00 ms per batch (p95), over 2 ms"
    ]
    slow = View(latency_limit_ms=2.0, baseline_p95_ms=lambda: 3.0)
    assert drive(batch_knob, slow, lambda s: 2.0) == []
    assert slow.notes == [
        "batch size not raised: the given batch's p95 latency (3.00 ms) already exceeds the "
        "limit (2 ms)"
    ]
