from __future__ import annotations

import pytest

from tfthroughput.hardware.metrics import ALL_METRICS, METRIC_NAMES, validate_metric_names


def test_every_metric_has_a_unique_name_a_unit_and_a_scope():
    names = [metric.name for metric in ALL_METRICS]
    assert len(names) == len(set(names)) == len(METRIC_NAMES)
    assert all(metric.unit and metric.scope in {"gpu", "host"} for metric in ALL_METRICS)


def test_none_selects_everything_and_names_are_kept():
    assert validate_metric_names(None) is None
    assert validate_metric_names(["power_watts", "cpu_percent"]) == {"power_watts", "cpu_percent"}


@pytest.mark.parametrize(
    ("metrics", "error", "fragment"),
    [
        ("power_watts", TypeError, "metrics='power_watts'"),
        (5, TypeError, "metrics=5"),
        ([1], TypeError, "metrics=[1]"),
        (["gpu_temp"], ValueError, "['gpu_temp']"),
        ([], ValueError, "metrics=[]"),
    ],
)
def test_bad_selections_name_the_argument_and_value(metrics, error, fragment):
    with pytest.raises(error) as info:
        validate_metric_names(metrics)
    assert fragment in str(info.value)
