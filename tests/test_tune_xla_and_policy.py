"""tuning/knobs/xla_and_policy.py: the precision policy tried at the best, and XLA flipped once
in inference, driven by hand (tests/knob_driving.py)."""

from __future__ import annotations

from knob_driving import GIVEN, Comparison, View, drive, spe

from tfthroughput.tuning.engine.contract import BestSoFar
from tfthroughput.tuning.knobs.xla_and_policy import policy_knob, xla_knob


def test_the_policy_is_tried_again_with_xla_as_given_where_the_flipped_best_keeps_float32():
    view = View(policy="mixed_bfloat16")
    view.best = BestSoFar(spe(4, jit=True)[0], Comparison(2.0))
    speeds = {True: 1.5, False: 2.5}  # bfloat16 slower under XLA, faster without
    proposed = drive(policy_knob, view, lambda s: speeds[s.jit_compile])
    assert proposed == spe(4, jit=True, policy="mixed_bfloat16") + spe(4, policy="mixed_bfloat16")
    assert drive(policy_knob, View(policy="float32"), lambda s: 2.0) == []  # the one in force


def test_xla_is_flipped_once_on_the_best_in_inference():
    assert drive(xla_knob, View(), lambda s: 2.0) == [GIVEN.with_(jit_compile=True)]
    assert drive(xla_knob, View(try_xla=False), lambda s: 2.0) == []
