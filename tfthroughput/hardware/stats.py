"""Summary statistics of one metric over one window (an epoch, a diagnosis phase)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

STATISTIC_NAMES: tuple[str, ...] = ("mean", "min", "max", "p95", "count")


@dataclass(frozen=True)
class MetricStats:
    """Statistics of the samples of one metric in one window.

    ``p95`` is the 95th percentile with linear interpolation between closest ranks (NumPy's
    default), so it equals the sample itself when there is only one.
    """

    mean: float
    min: float
    max: float
    p95: float
    count: int


def summarize(samples: Sequence[float]) -> MetricStats:
    """Summarise a non-empty sequence of samples.

    Raises:
        ValueError: If ``samples`` is empty.
    """
    if not samples:
        raise ValueError("`samples` must not be empty. Received: samples=[]")
    if len(samples) == 1:
        value = float(samples[0])
        return MetricStats(mean=value, min=value, max=value, p95=value, count=1)
    return MetricStats(
        mean=statistics.fmean(samples),
        min=float(min(samples)),
        max=float(max(samples)),
        p95=statistics.quantiles(samples, n=20, method="inclusive")[-1],
        count=len(samples),
    )
