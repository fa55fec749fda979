"""diagnose's argument checks: each names the argument and the value received."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfthroughput._validation import (
    check_callable,
    check_model,
    check_positive_int,
)
from tfthroughput.diagnosis.verdict import DiagnosisThresholds
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


@dataclasses.dataclass(frozen=True)
class DiagnosisArguments:
    """The arguments of ``diagnose`` (either mode), checked, with their defaults filled in."""

    model: keras.Model
    dataset: tf.data.Dataset
    steps: int
    repeats: int
    thresholds: DiagnosisThresholds
    utilization_probe: Any
    clock: Callable[[], float]
    precision: PrecisionRecommendation


def check_diagnosis_arguments(
    model: object,
    dataset: object,
    steps: object,
    repeats: object,
    thresholds: object,
    utilization_probe: object,
    clock: object,
    precision: object,
    *,
    compiled: bool,
) -> DiagnosisArguments:
    """Check ``diagnose``'s arguments in the order they are listed; ``compiled``: the model
    must be compiled (training), else only a ``keras.Model`` (inference)."""
    check_model(model, compiled=compiled)
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            "`dataset` must be a tf.data.Dataset, a keras.utils.PyDataset, or NumPy arrays "
            "(x, with the targets as `y`). "
            f"Received: dataset={dataset!r} of type {type(dataset).__name__}"
        )
    check_positive_int("steps", steps)
    check_positive_int("repeats", repeats)
    thresholds = DiagnosisThresholds() if thresholds is None else thresholds
    if not isinstance(thresholds, DiagnosisThresholds):
        raise TypeError(
            "`thresholds` must be a DiagnosisThresholds or None. "
            f"Received: thresholds={thresholds!r}"
        )
    if utilization_probe is not None and not callable(utilization_probe):
        raise TypeError(
            "`utilization_probe` must be a callable returning a context manager, or None. "
            f"Received: utilization_probe={utilization_probe!r}"
        )
    check_callable("clock", clock)
    precision = check_precision(precision)
    return DiagnosisArguments(
        model, dataset, steps, repeats, thresholds, utilization_probe, clock, precision
    )


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
