"""Summary statistics of one metric over one window (an epoch, a diagnosis phase)."""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

STATISTIC_NAMES: tuple[str, ...] = ("mean", "min", "max", "p95", "count")


@dataclass(frozen=True)
class MetricStats:
    """Statistics of the samples of one metric in one window.

    ``p95`` is the 95th percentile with linear interpolation between closest ranks (NumPy's
    default), so it equals the sample itself when there is only one.

    ``samples`` keeps the window's samples (not compared, not shown), so that the statistics
    of consecutive windows can be merged exactly (:func:`merge`): a monitor that cuts an epoch
    into windows reports the epoch's p95 over all its samples, not an estimate from the windows'.
    """

    mean: float
    min: float
    max: float
    p95: float
    count: int
    samples: Sequence[float] = field(default=(), compare=False, repr=False)


def summarize(samples: Sequence[float]) -> MetricStats:
    """Summarise a non-empty sequence of samples.

    Raises:
        ValueError: If ``samples`` is empty.
    """
    if not samples:
        raise ValueError("`samples` must not be empty. Received: samples=[]")
    kept = array("d", samples)
    if len(kept) == 1:
        value = kept[0]
        return MetricStats(mean=value, min=value, max=value, p95=value, count=1, samples=kept)
    return MetricStats(
        mean=statistics.fmean(kept),
        min=min(kept),
        max=max(kept),
        p95=statistics.quantiles(kept, n=20, method="inclusive")[-1],
        count=len(kept),
        samples=kept,
    )


def merge(parts: Sequence[MetricStats]) -> MetricStats:
    """The statistics of every sample of ``parts`` together (e.g. an epoch's windows).

    Exact: the samples are summarised again, so the merged ``p95`` is the p95 of the union.

    Raises:
        ValueError: If ``parts`` is empty, or a part was built without its samples.

    Example:
        >>> merge([summarize([1.0, 2.0]), summarize([3.0])]).mean
        2.0
    """
    if not parts:
        raise ValueError("`parts` must not be empty. Received: parts=[]")
    combined = array("d")
    for part in parts:
        if len(part.samples) != part.count:
            raise ValueError(
                "`parts` must keep their samples (made by `summarize`). "
                f"Received: a part with count={part.count} and {len(part.samples)} samples"
            )
        combined.extend(part.samples)
    return summarize(combined)
