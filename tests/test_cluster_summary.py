from __future__ import annotations

import math

import pytest

from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.hardware.stats import MetricStats
from tfthroughput.monitor.cluster_summary import (
    STRAGGLER_MIN_LEAD,
    WORKER_FIELDS,
    ClusterEpoch,
    Spread,
    WorkerEpoch,
    cluster_scalars,
    summarize_cluster,
    worker_row,
)

NAN = float("nan")


def _stats(**means: float) -> dict[SampleKey, MetricStats]:
    """``gpu0__utilization_percent=40`` -> {SampleKey("gpu0", "utilization_percent"): 40 ...}"""
    return {
        SampleKey(*name.split("__")): MetricStats(value, value, value, value, 3)
        for name, value in means.items()
    }


def test_a_worker_row_holds_its_gpus_cpu_share_and_input_share():
    stats = _stats(
        gpu0__utilization_percent=40.0,
        gpu1__utilization_percent=60.0,
        gpu0__sm_activity_percent=30.0,
        gpu1__sm_activity_percent=50.0,
        gpu1__power_watts=300.0,
        host__process_cpu_percent=150.0,
        host__cpu_percent=90.0,
        input__python_percent=25.0,
    )
    row = worker_row(2, stats, 3.5, cpu_count=4)
    assert dict(zip(WORKER_FIELDS, row, strict=True)) == {
        "rank": 2.0,
        "epoch_seconds": 3.5,
        "gpus": 2.0,
        "gpu_utilization_mean": 50.0,
        "gpu_utilization_min": 40.0,
        "gpu_utilization_max": 60.0,
        "sm_activity_mean": 40.0,
        "sm_activity_min": 30.0,
        "sm_activity_max": 50.0,
        "process_cpu_share_percent": 37.5,  # 150 % of one core, of 4 cores
        "input_python_percent": 25.0,
    }


def test_a_worker_without_gpu_or_measurements_sends_nan():
    row = worker_row(1, {}, None, cpu_count=2)
    assert row[0] == 1.0 and row[2] == 0.0
    assert [name for name, value in zip(WORKER_FIELDS, row, strict=True) if math.isnan(value)] == [
        name for name in WORKER_FIELDS if name not in ("rank", "gpus")
    ]


def _row(rank, seconds, gpus, utilization, sm, cpu, python):
    spread = lambda values: values if values else (NAN, NAN, NAN)  # noqa: E731
    return (rank, seconds, gpus, *spread(utilization), *spread(sm), cpu, python)


NAMES = ("chief_0", "worker_0", "worker_1")
ROWS = [
    _row(2, 10.0, 0, None, None, 20.0, 95.0),  # no GPU, busy in Python input
    _row(0, 10.1, 2, (50.0, 40.0, 60.0), (20.0, 10.0, 30.0), 10.0, 0.0),
    _row(1, 9.9, 1, (80.0, 80.0, 80.0), (35.0, 35.0, 35.0), 5.0, NAN),
    _row(0, 10.1, 2, (50.0, 40.0, 60.0), (20.0, 10.0, 30.0), 10.0, 0.0),  # a second replica
]


def test_the_cluster_spread_and_the_straggler():
    epoch = summarize_cluster(ROWS, NAMES)
    assert [worker.name for worker in epoch.workers] == list(NAMES)
    chief, first, second = epoch.workers
    assert chief == WorkerEpoch(
        name="chief_0",
        epoch_seconds=10.1,
        gpus=2,
        gpu_utilization=Spread(min=40.0, mean=50.0, max=60.0),
        sm_activity=Spread(min=10.0, mean=20.0, max=30.0),
        process_cpu_share_percent=10.0,
        input_python_percent=0.0,
    )
    assert (first.busy_percent, second.busy_percent, chief.busy_percent) == (35.0, 95.0, 20.0)
    assert second.gpu_utilization is None and first.input_python_percent is None
    # Over the 3 GPUs: min of minima, GPU-weighted mean of means, max of maxima.
    assert epoch.gpu_utilization == Spread(min=40.0, mean=60.0, max=80.0)
    assert epoch.sm_activity == Spread(min=10.0, mean=25.0, max=35.0)
    assert (epoch.straggler, epoch.lead_percent) == ("worker_1", 95.0 - 27.5)


def test_no_straggler_below_the_minimum_lead_or_with_one_measured_worker():
    close = [
        _row(0, 5.0, 0, None, None, 50.0, NAN),
        _row(1, 5.0, 0, None, None, 50.0 + STRAGGLER_MIN_LEAD - 0.5, NAN),
    ]
    assert summarize_cluster(close, NAMES[:2]).straggler is None
    assert summarize_cluster(close, NAMES[:2]).lead_percent == STRAGGLER_MIN_LEAD - 0.5
    lonely = [_row(0, 5.0, 0, None, None, 50.0, NAN), _row(1, 5.0, 0, None, None, NAN, NAN)]
    epoch = summarize_cluster(lonely, NAMES[:2])
    assert (epoch.straggler, epoch.lead_percent, epoch.gpu_utilization) == (None, None, None)


def test_cluster_scalars():
    epoch = summarize_cluster(ROWS, NAMES)
    assert cluster_scalars(epoch, 0.012) == {
        "cluster/workers": 3,
        "cluster/gpus": 3,
        "cluster/gpu_utilization_percent/min": 40.0,
        "cluster/gpu_utilization_percent/mean": 60.0,
        "cluster/gpu_utilization_percent/max": 80.0,
        "cluster/sm_activity_percent/min": 10.0,
        "cluster/sm_activity_percent/mean": 25.0,
        "cluster/sm_activity_percent/max": 35.0,
        "cluster/exchange_seconds": 0.012,
        "chief_0/epoch_seconds": 10.1,
        "chief_0/gpus": 2,
        "chief_0/gpu_utilization_percent": 50.0,
        "chief_0/sm_activity_percent": 20.0,
        "chief_0/process_cpu_share_percent": 10.0,
        "chief_0/input_python_percent": 0.0,
        "chief_0/busy_percent": 20.0,
        "worker_0/epoch_seconds": 9.9,
        "worker_0/gpus": 1,
        "worker_0/gpu_utilization_percent": 80.0,
        "worker_0/sm_activity_percent": 35.0,
        "worker_0/process_cpu_share_percent": 5.0,
        "worker_0/busy_percent": 35.0,
        "worker_1/epoch_seconds": 10.0,
        "worker_1/gpus": 0,
        "worker_1/process_cpu_share_percent": 20.0,
        "worker_1/input_python_percent": 95.0,
        "worker_1/busy_percent": 95.0,
        "straggler/rank": 2,
        "straggler/lead_percent": 67.5,
    }
    quiet = ClusterEpoch(epoch.workers[:1], None, None, None, None)
    assert cluster_scalars(quiet, None)["straggler/rank"] == -1
    assert "straggler/lead_percent" not in cluster_scalars(quiet, None)


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [([(0.0, 1.0)], "must hold 11 values"), ([_row(3, 1.0, 0, None, None, 1.0, 1.0)], "rank 3")],
)
def test_unreadable_rows_are_refused(rows, fragment):
    with pytest.raises(ValueError, match=fragment):
        summarize_cluster(rows, NAMES)
