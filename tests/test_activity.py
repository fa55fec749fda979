"""`hardware.activity`: GPU-Util against SM activity, on the issue's H200 measurements."""

from __future__ import annotations

import pytest

from tfthroughput.hardware.activity import (
    busy_but_idle_percent,
    overstates_work,
    utilization_and_sm_activity,
)
from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.hardware.stats import summarize

# (GPU-Util %, SM activity %) of bf16 matmul loops on an H200: 64x64, 1024x1024, 8192x8192.
H200_ROWS = [(23.6, 0.5), (47.8, 27.5), (95.5, 92.5)]


@pytest.mark.parametrize(
    ("utilization", "sm_activity", "gap", "overstated"),
    [
        (23.6, 0.5, 23.6 - 0.5, True),  # tiny kernels: 47x
        (47.8, 27.5, 47.8 - 27.5, False),  # 1.7x
        (95.5, 92.5, 95.5 - 92.5, False),
        (20.0, 0.0, 20.0, False),  # low GPU-Util fools nobody
        (20.1, 0.0, 20.1, True),
        (40.0, 20.0, 20.0, True),  # exactly twice
        (40.0, 20.1, 40.0 - 20.1, False),
        (10.0, 12.0, 0.0, False),  # SM activity above GPU-Util: clamped, not negative
    ],
)
def test_the_gap_and_the_rule(utilization, sm_activity, gap, overstated):
    assert busy_but_idle_percent(utilization, sm_activity) == gap
    assert overstates_work(utilization, sm_activity) is overstated


def test_pairs_are_the_means_of_sources_that_have_both():
    stats = {
        SampleKey("gpu0", "utilization_percent"): summarize([20.0, 30.0]),
        SampleKey("gpu0", "sm_activity_percent"): summarize([1.0, 2.0]),
        SampleKey("gpu1", "utilization_percent"): summarize([50.0]),  # no GPM on this one
        SampleKey("host", "cpu_percent"): summarize([75.0]),
    }
    assert utilization_and_sm_activity(stats) == {"gpu0": (25.0, 1.5)}
