"""One epoch of a multi-worker cluster: each worker's summary, the cluster's spread, the straggler.

Each worker turns its epoch's statistics into one short row of floats (:func:`worker_row`);
the rows of every worker are exchanged (:mod:`tfthroughput.monitor.cluster_exchange`), and the chief
reads them back here (:func:`summarize_cluster`) and writes :func:`cluster_scalars`.

**The straggler.** Under synchronous data parallelism every step ends with an all-reduce, so
every worker's epoch takes the same wall time (to a few milliseconds): the slow worker makes
the others wait instead of finishing later. What differs is how busy each worker kept itself.
A worker's *busy share* is the largest of: the SM activity of its GPUs (GPM; GPU-Util is left
out because collective kernels spinning while they wait for the others count as busy), its
process's CPU time as a share of the host's cores, and the share of the epoch its input spent
in Python (:mod:`tfthroughput.monitor.input_activity`). The straggler is the busiest worker
when its busy share leads the median of the others' by at least ``STRAGGLER_MIN_LEAD``
percentage points; otherwise there is none.

No TensorFlow here: rows are plain floats, missing values are NaN.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.hardware.stats import MetricStats
from tfthroughput.monitor.input_activity import METRIC_NAME, SOURCE_NAME

# Percentage points by which the busiest worker must lead the median of the others' busy
# shares to be named the straggler: below that, run-to-run noise.
STRAGGLER_MIN_LEAD = 10.0

# What each worker contributes, in order: one float each, NaN when unknown.
WORKER_FIELDS = (
    "rank",
    "epoch_seconds",
    "gpus",
    "gpu_utilization_mean",
    "gpu_utilization_min",
    "gpu_utilization_max",
    "sm_activity_mean",
    "sm_activity_min",
    "sm_activity_max",
    "process_cpu_share_percent",
    "input_python_percent",
)
NAN = float("nan")


@dataclass(frozen=True)
class Spread:
    """A quantity's minimum, mean and maximum over the GPUs of the cluster (or of one worker)."""

    min: float
    mean: float
    max: float


@dataclass(frozen=True)
class WorkerEpoch:
    """What one worker reported for one epoch.

    Attributes:
        name: ``<task_type>_<index>``.
        epoch_seconds: The epoch's wall time on that worker.
        gpus: GPUs sampled there (0: no GPU, or no NVML).
        gpu_utilization: GPU-Util over its GPUs' epoch means, percent; ``None`` without GPUs.
        sm_activity: SM activity likewise (GPM, Hopper and newer); ``None`` where unread.
        process_cpu_share_percent: Its process's CPU time as a share of the host's cores.
        input_python_percent: Share of the epoch its input ran Python code.
    """

    name: str
    epoch_seconds: float | None
    gpus: int
    gpu_utilization: Spread | None
    sm_activity: Spread | None
    process_cpu_share_percent: float | None
    input_python_percent: float | None

    @property
    def busy_percent(self) -> float | None:
        """The largest of its SM activity, CPU share and input-in-Python share; ``None``
        when none of them was measured."""
        shares = [
            self.sm_activity.mean if self.sm_activity else None,
            self.process_cpu_share_percent,
            self.input_python_percent,
        ]
        known = [share for share in shares if share is not None]
        return max(known) if known else None


@dataclass(frozen=True)
class ClusterEpoch:
    """The whole cluster for one epoch.

    Attributes:
        workers: Every worker's report, in rank order (chief first).
        gpu_utilization: GPU-Util over every GPU of the cluster (epoch means), or ``None``.
        sm_activity: SM activity likewise, or ``None``.
        straggler: Name of the worker holding the others back, or ``None``.
        lead_percent: How far the busiest worker's busy share leads the median of the
            others', in percentage points (``None`` with fewer than two measured workers).
    """

    workers: tuple[WorkerEpoch, ...]
    gpu_utilization: Spread | None
    sm_activity: Spread | None
    straggler: str | None
    lead_percent: float | None


def worker_row(
    rank: int,
    stats: Mapping[SampleKey, MetricStats],
    epoch_seconds: float | None,
    cpu_count: int,
) -> tuple[float, ...]:
    """This worker's contribution to the exchange, laid out as ``WORKER_FIELDS``.

    Args:
        rank: The worker's position in the cluster (chief first).
        stats: The epoch's statistics from the sampler (every metric, unfiltered).
        epoch_seconds: The epoch's wall time, or ``None``.
        cpu_count: CPU cores this process may use, to turn CPU percent into a host share.
    """
    utilization = _gpu_means(stats, "utilization_percent")
    sm_activity = _gpu_means(stats, "sm_activity_percent")
    process_cpu = stats.get(SampleKey("host", "process_cpu_percent"))
    python = stats.get(SampleKey(SOURCE_NAME, METRIC_NAME))
    return (
        float(rank),
        NAN if epoch_seconds is None else float(epoch_seconds),
        float(len({key.source for key in stats if key.source.startswith("gpu")})),
        *_spread_fields(utilization),
        *_spread_fields(sm_activity),
        NAN if process_cpu is None else process_cpu.mean / max(cpu_count, 1),
        NAN if python is None else python.mean,
    )


def summarize_cluster(rows: Sequence[Sequence[float]], names: Sequence[str]) -> ClusterEpoch:
    """Read the exchanged rows back: one per worker, any order, duplicates allowed (one per
    replica); ``names[rank]`` names each worker.

    Raises:
        ValueError: If a row is not ``len(WORKER_FIELDS)`` long or names an unknown rank.
    """
    by_rank: dict[int, dict[str, float]] = {}
    for row in rows:
        if len(row) != len(WORKER_FIELDS):
            raise ValueError(
                f"each row must hold {len(WORKER_FIELDS)} values. Received: {list(row)!r}"
            )
        fields = dict(zip(WORKER_FIELDS, (float(value) for value in row), strict=True))
        rank = round(fields["rank"])
        if not 0 <= rank < len(names):
            raise ValueError(f"a row names rank {rank}, but there are {len(names)} workers")
        by_rank.setdefault(rank, fields)
    workers = tuple(_worker(names[rank], by_rank[rank]) for rank in sorted(by_rank))
    straggler, lead = _straggler(workers)
    return ClusterEpoch(
        workers=workers,
        gpu_utilization=_cluster_spread(workers, "gpu_utilization"),
        sm_activity=_cluster_spread(workers, "sm_activity"),
        straggler=straggler,
        lead_percent=lead,
    )


def cluster_scalars(epoch: ClusterEpoch, exchange_seconds: float | None) -> dict[str, float]:
    """The scalars of the ``cluster`` run for one epoch; unknown values are left out.

    Tags: ``cluster/{gpu_utilization,sm_activity}_percent/{min,mean,max}``, ``cluster/workers``,
    ``cluster/gpus``, ``cluster/exchange_seconds``; per worker ``<worker>/epoch_seconds``,
    ``<worker>/gpus``, ``<worker>/gpu_utilization_percent``, ``<worker>/sm_activity_percent``,
    ``<worker>/process_cpu_share_percent``, ``<worker>/input_python_percent``,
    ``<worker>/busy_percent``; ``straggler/rank`` (-1: none) and ``straggler/lead_percent``.
    """
    scalars: dict[str, float] = {
        "cluster/workers": len(epoch.workers),
        "cluster/gpus": sum(worker.gpus for worker in epoch.workers),
    }
    for name, spread in (
        ("gpu_utilization", epoch.gpu_utilization),
        ("sm_activity", epoch.sm_activity),
    ):
        if spread is not None:
            for statistic in ("min", "mean", "max"):
                scalars[f"cluster/{name}_percent/{statistic}"] = getattr(spread, statistic)
    if exchange_seconds is not None:
        scalars["cluster/exchange_seconds"] = exchange_seconds
    for worker in epoch.workers:
        values = {
            "epoch_seconds": worker.epoch_seconds,
            "gpus": worker.gpus,
            "gpu_utilization_percent": worker.gpu_utilization and worker.gpu_utilization.mean,
            "sm_activity_percent": worker.sm_activity and worker.sm_activity.mean,
            "process_cpu_share_percent": worker.process_cpu_share_percent,
            "input_python_percent": worker.input_python_percent,
            "busy_percent": worker.busy_percent,
        }
        for tag, value in values.items():
            if value is not None:
                scalars[f"{worker.name}/{tag}"] = value
    names = [worker.name for worker in epoch.workers]
    scalars["straggler/rank"] = names.index(epoch.straggler) if epoch.straggler else -1
    if epoch.lead_percent is not None:
        scalars["straggler/lead_percent"] = epoch.lead_percent
    return scalars


def _gpu_means(stats: Mapping[SampleKey, MetricStats], metric: str) -> list[float]:
    return [
        value.mean
        for key, value in sorted(stats.items())
        if key.source.startswith("gpu") and key.metric == metric
    ]


def _spread_fields(values: Sequence[float]) -> tuple[float, float, float]:
    if not values:
        return NAN, NAN, NAN
    return statistics.fmean(values), min(values), max(values)


def _known(value: float) -> float | None:
    return None if math.isnan(value) else value


def _worker(name: str, fields: Mapping[str, float]) -> WorkerEpoch:
    def spread(prefix: str) -> Spread | None:
        mean, low, high = (fields[f"{prefix}_{stat}"] for stat in ("mean", "min", "max"))
        return None if math.isnan(mean) else Spread(min=low, mean=mean, max=high)

    return WorkerEpoch(
        name=name,
        epoch_seconds=_known(fields["epoch_seconds"]),
        gpus=0 if math.isnan(fields["gpus"]) else round(fields["gpus"]),
        gpu_utilization=spread("gpu_utilization"),
        sm_activity=spread("sm_activity"),
        process_cpu_share_percent=_known(fields["process_cpu_share_percent"]),
        input_python_percent=_known(fields["input_python_percent"]),
    )


def _cluster_spread(workers: Sequence[WorkerEpoch], attribute: str) -> Spread | None:
    """Min of the minima, GPU-weighted mean of the means, max of the maxima."""
    measured = [(w.gpus, getattr(w, attribute)) for w in workers if getattr(w, attribute)]
    if not measured:
        return None
    weight = sum(max(gpus, 1) for gpus, _ in measured)
    return Spread(
        min=min(spread.min for _, spread in measured),
        mean=sum(max(gpus, 1) * spread.mean for gpus, spread in measured) / weight,
        max=max(spread.max for _, spread in measured),
    )


def _straggler(workers: Sequence[WorkerEpoch]) -> tuple[str | None, float | None]:
    busy = [(worker.busy_percent, worker.name) for worker in workers]
    measured = [(share, name) for share, name in busy if share is not None]
    if len(measured) < 2:
        return None, None
    top_share, top_name = max(measured)
    others = [share for share, name in measured if name != top_name]
    lead = top_share - statistics.median(others)
    return (top_name if lead >= STRAGGLER_MIN_LEAD else None), lead
