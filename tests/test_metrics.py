from __future__ import annotations

import re

import pytest
from readme import logged_tags_table

from tfthroughput.hardware.metrics import (
    ALL_METRICS,
    GPU_METRICS,
    HOST_METRICS,
    METRIC_NAMES,
    validate_metric_names,
)


def test_every_metric_has_a_unique_name_and_a_unit():
    names = [metric.name for metric in ALL_METRICS]
    assert len(names) == len(set(names)) == len(METRIC_NAMES)
    assert all(metric.unit for metric in ALL_METRICS)


def test_the_readme_tag_table_is_the_metric_catalogue():
    per_metric = {"gpu": [], "host": []}
    catalogue = {metric.name for metric in GPU_METRICS + HOST_METRICS}
    for tag, unit, meaning in logged_tags_table():
        # A sampled metric is logged as statistics; an accumulated one (energy) as one total.
        match = re.fullmatch(r"`(gpu<i>|host)/(\w+)/<stat>`", tag) or re.fullmatch(
            r"`(gpu<i>|host)/(\w+)`", tag
        )
        if match and (tag.endswith("/<stat>`") or match[2] in catalogue):
            assert meaning, tag
            scope = "gpu" if match[1] == "gpu<i>" else "host"
            per_metric[scope].append((match[2], unit))
    assert per_metric["gpu"] == [(metric.name, metric.unit) for metric in GPU_METRICS]
    assert per_metric["host"] == [(metric.name, metric.unit) for metric in HOST_METRICS]


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
