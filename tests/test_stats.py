from __future__ import annotations

import numpy as np
import pytest

from tfthroughput.hardware.stats import MetricStats, summarize


@pytest.mark.parametrize(
    "samples",
    [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], [3.5, 1.0], [5, 1, 9, 2, 7, 7, 8]],
)
def test_statistics_match_numpy(samples):
    stats = summarize(samples)
    assert stats.mean == pytest.approx(np.mean(samples))
    assert stats.min == min(samples)
    assert stats.max == max(samples)
    assert stats.p95 == pytest.approx(np.percentile(samples, 95))
    assert stats.count == len(samples)


def test_a_single_sample_is_every_statistic():
    assert summarize([42.0]) == MetricStats(mean=42.0, min=42.0, max=42.0, p95=42.0, count=1)


def test_empty_samples_are_rejected():
    with pytest.raises(ValueError, match="samples=\\[\\]"):
        summarize([])
