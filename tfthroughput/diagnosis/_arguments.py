"""diagnose's argument checks: each names the argument and the value received."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

from tfthroughput.precision.precision_recommendation import (
    PrecisionRecommendation,
    recommend_precision,
)


def check_precision(precision: object) -> PrecisionRecommendation:
    """``precision`` itself, or what :func:`recommend_precision` says here when ``None``."""
    if precision is None:
        return recommend_precision()
    if not isinstance(precision, PrecisionRecommendation):
        raise TypeError(
            "`precision` must be a PrecisionRecommendation (from recommend_precision) or None. "
            f"Received: precision={precision!r}"
        )
    return precision


def check_utilization(value: object, what: str = "reading") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"`utilization_probe`'s {what} must be a number of percent or None. Received: {value!r}"
        )
    value = float(value)
    if not 0.0 <= value <= 100.0 or math.isnan(value):
        raise ValueError(
            f"`utilization_probe`'s {what} must be between 0 and 100 percent. Received: {value}"
        )
    return value


def probe_readings(readings: Sequence[Callable[[], object]]) -> tuple[float | None, float | None]:
    """The GPU-Util and SM activity read from the first ``utilization_probe`` reading entered
    (each checked; ``None`` where nothing was read or the probe has no ``sm_activity``)."""
    if not readings:
        return None, None
    sm_activity = getattr(readings[0], "sm_activity", None)
    return (
        check_utilization(readings[0]()),
        check_utilization(sm_activity(), "sm_activity()") if callable(sm_activity) else None,
    )
