"""GPU-Util against SM activity: how much of the time NVML calls "busy" did real work.

NVML's GPU-Util is the share of the sample period in which any kernel was running, however few
SMs it kept busy. GPM's SM activity (Hopper and newer) is the share of SMs busy. Measured on an
H200 with bf16 matmul loops, 5 s each:

=========================================  ========  =============
load                                       GPU-Util  SM activity
=========================================  ========  =============
64x64, 77k kernels/s                       23.6 %    0.5 %
1024x1024, 74k kernels/s                   47.8 %    27.5 %
8192x8192, 720 kernels/s                   95.5 %    92.5 %
=========================================  ========  =============

With tiny kernels GPU-Util overstates the work 47 times. Where both are read, their gap
(``busy_but_idle_percent``) and the rule :func:`overstates_work` say so.
"""

from __future__ import annotations

from collections.abc import Mapping

from tfthroughput.hardware.stats import MetricStats
from tfthroughput.hardware.window_stats import SampleKey

UTILIZATION = "utilization_percent"
SM_ACTIVITY = "sm_activity_percent"
BUSY_BUT_IDLE = "busy_but_idle_percent"

# GPU-Util at or below this is low already; nobody is fooled by it.
MIN_UTILIZATION_PERCENT = 20.0
# GPU-Util at least this many times SM activity overstates the work.
OVERSTATEMENT_RATIO = 2.0


def busy_but_idle_percent(utilization: float, sm_activity: float) -> float:
    """GPU-Util minus SM activity, clamped at 0, in percentage points.

    Over one window it is the mean of the per-sample gaps (both metrics come from the same
    reads), so it is the share of time the GPU counted as busy with no SM at work, to first
    order.

    Example:
        >>> round(busy_but_idle_percent(23.6, 0.5), 6)
        23.1
    """
    return max(0.0, utilization - sm_activity)


def overstates_work(utilization: float, sm_activity: float) -> bool:
    """Whether GPU-Util (above 20 %) is at least twice SM activity.

    Example:
        >>> overstates_work(23.6, 0.5), overstates_work(47.8, 27.5), overstates_work(95.5, 92.5)
        (True, False, False)
    """
    return (
        utilization > MIN_UTILIZATION_PERCENT and utilization >= OVERSTATEMENT_RATIO * sm_activity
    )


def utilization_and_sm_activity(
    stats: Mapping[SampleKey, MetricStats],
) -> dict[str, tuple[float, float]]:
    """``{source: (mean GPU-Util, mean SM activity)}`` for each source where both were read."""
    pairs = {}
    for key, utilization in stats.items():
        if key.metric == UTILIZATION:
            sm_activity = stats.get(SampleKey(key.source, SM_ACTIVITY))
            if sm_activity is not None:
                pairs[key.source] = (utilization.mean, sm_activity.mean)
    return pairs
