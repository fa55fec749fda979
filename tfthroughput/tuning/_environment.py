"""What every tune search shares around its trials: the dtype policy to try, a clean Keras
session between searches, and the GPU sampler (training and inference alike)."""

from __future__ import annotations

import gc
from typing import Any

import keras

from tfthroughput.precision.precision_recommendation import PrecisionRecommendation
from tfthroughput.tuning._devices import recommendation_here
from tfthroughput.tuning.distribution import may_clear_session


def clear_session(policy: Any) -> None:
    """Free the previous models' memory, keeping the dtype policy (clear_session resets it)."""
    if may_clear_session():
        keras.backend.clear_session()
    else:
        gc.collect()  # inside a strategy's scope: the models' memory without Keras's state
    keras.config.set_dtype_policy(policy)


def policy_to_try(precision: object, notes: list[str]) -> str | None:
    """The recommended policy to try, or ``None`` (with a note saying why) when there is none."""
    if precision is False:
        return None
    if precision is None or precision is True:
        precision = recommendation_here()
    if not isinstance(precision, PrecisionRecommendation):
        raise TypeError(
            "`precision` must be None, False or a PrecisionRecommendation (from "
            f"recommend_precision). Received: precision={precision!r}"
        )
    current = keras.config.dtype_policy().name
    if precision.policy in (current, "float32"):
        notes.append(
            f"dtype policy not tried: recommend_precision says {precision.policy} "
            f"({precision.policy_reason})"
        )
        return None
    return precision.policy


def gpu_sampler() -> Any:
    """A started sampler of GPU-Util and SM activity, or ``None`` without a GPU."""
    from tfthroughput.hardware.discovery import discover_sources
    from tfthroughput.hardware.sampler import Sampler

    discovery = discover_sources(["utilization_percent", "sm_activity_percent"], host=False)
    if not discovery.sources:
        return None
    return Sampler(discovery.sources, interval=0.05).start()
