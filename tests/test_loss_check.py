"""LossCheck: the tolerance rule and its printed form."""

from __future__ import annotations

import math

from tfthroughput.tuning import LossCheck
from tfthroughput.tuning.training.loss_check import EXACT_TOLERANCE


def test_same_arithmetic_must_match_to_the_exact_tolerance():
    assert LossCheck(2.0, 2.0 * (1 + EXACT_TOLERANCE / 2), True, EXACT_TOLERANCE).passed
    assert not LossCheck(2.0, 2.0 * (1 + 2 * EXACT_TOLERANCE), True, EXACT_TOLERANCE).passed


def test_changed_arithmetic_is_rejected_beyond_the_loss_tolerance():
    check = LossCheck(1.0, 1.08, False, 0.05)
    assert not check.passed
    assert str(check) == "DIVERGES: 8.0e-02 replayed (changed arithmetic, tolerance 5e-02)"
    assert LossCheck(1.0, 1.04, False, 0.05).passed
    assert not LossCheck(1.0, math.nan, False, 0.05).passed
