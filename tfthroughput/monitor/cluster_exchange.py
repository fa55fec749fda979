"""The per-epoch exchange between the workers of a MultiWorkerMirroredStrategy cluster.

At every epoch end each worker's monitor puts its summary row (:func:`worker_row`, eleven
floats) into its line of a small matrix and the strategy sums the matrices of all workers: one
all-reduce through the strategy's own collectives (gRPC or NCCL, whatever it uses for
gradients), so no shared filesystem is needed. Every worker must take part in every exchange,
or the others wait for it, so a worker with no GPU or no NVML sends NaN where it has nothing,
and a fault while building the row sends a row of NaN rather than skipping the exchange. The
chief reads the rows back (:func:`summarize_cluster`) and writes the ``cluster`` run.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.hardware.stats import MetricStats
from tfthroughput.monitor.cluster_summary import (
    NAN,
    WORKER_FIELDS,
    ClusterEpoch,
    cluster_scalars,
    summarize_cluster,
    worker_row,
)
from tfthroughput.monitor.events import EventWriter
from tfthroughput.monitor.strategy import Placement

CLUSTER_RUN = "cluster"


class ClusterExchange:
    """One worker's side of the exchange for one ``fit``; the chief also writes the cluster run.

    Args:
        placement: This worker's place in the cluster (``placement.multi_worker`` is True).
        log_dir: The monitor's ``log_dir``; the chief writes ``<log_dir>/cluster``.
        clock: Seconds, to time the exchange. Defaults to ``time.perf_counter``.

    Raises:
        ValueError: On the chief, if ``<log_dir>/cluster`` cannot be written.
    """

    def __init__(
        self,
        placement: Placement,
        log_dir: str,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.placement = placement
        self._clock = clock
        self._cpu_count = _usable_cpus()
        self._failed = False
        self.writer = (
            EventWriter(os.path.join(log_dir, CLUSTER_RUN), log_dir) if placement.is_chief else None
        )

    def epoch_end(
        self,
        epoch: int,
        stats: Mapping[SampleKey, MetricStats],
        epoch_seconds: float | None,
    ) -> ClusterEpoch | None:
        """Exchange this epoch's rows; on the chief, write and return the cluster's epoch.

        Never raises: a failed exchange (a worker gone) is warned about once and the exchange
        stops for the rest of this ``fit``.
        """
        if self._failed:
            return None
        try:
            row = worker_row(self.placement.rank, stats, epoch_seconds, self._cpu_count)
        except Exception:  # noqa: BLE001 - still take part, or every other worker waits
            row = (float(self.placement.rank),) + (NAN,) * (len(WORKER_FIELDS) - 1)
        start = self._clock()
        try:
            rows = all_gather_rows(
                self.placement.strategy, row, self.placement.rank, len(self.placement.worker_names)
            )
        except Exception as error:  # noqa: BLE001 - monitoring must not stop training
            self._failed = True
            warnings.warn(
                f"GPUMonitor could not exchange epoch {epoch}'s summary with the other "
                f"workers ({error!r}); the cluster run stops here.",
                MonitoringWarning,
                stacklevel=2,
            )
            return None
        seconds = self._clock() - start
        if self.writer is None:
            return None
        try:
            cluster = summarize_cluster(rows, self.placement.worker_names)
        except ValueError as error:
            warnings.warn(
                f"GPUMonitor received an unreadable cluster summary for epoch {epoch}: {error}",
                MonitoringWarning,
                stacklevel=2,
            )
            return None
        self.writer.write(epoch, cluster_scalars(cluster, seconds))
        return cluster

    def close(self) -> None:
        """Close the cluster run's writer (chief); idempotent."""
        if self.writer is not None:
            self.writer.close()


def all_gather_rows(strategy, row: Sequence[float], rank: int, workers: int) -> list[list[float]]:
    """Every worker's ``row``, in rank order: one all-reduce (sum) of a small matrix.

    Each worker writes its row into its own line of a ``workers x len(row)`` matrix of zeros
    and the strategy sums the matrices, the same collective that sums gradients, once
    (``strategy.gather`` would take two: the shapes, then the values). A worker with several
    local replicas puts ``row / replicas`` on each, so the sum holds the row (exactly for a
    power-of-two count, to a rounding error otherwise). NaN stays NaN.

    Args:
        strategy: A ``tf.distribute`` strategy (MultiWorkerMirroredStrategy here).
        row: This worker's floats; every worker's row has the same length.
        rank: This worker's line, ``0 <= rank < workers``.
        workers: Workers in the cluster.

    Returns:
        ``workers`` rows of floats.
    """
    import tensorflow as tf

    matrix = np.zeros((workers, len(row)), dtype=np.float64)
    matrix[rank] = row

    def on_each_replica(share: float):
        line = tf.constant(matrix * share)
        return strategy.experimental_distribute_values_from_function(lambda _: tf.identity(line))

    per_replica = on_each_replica(1.0)
    local_replicas = len(strategy.experimental_local_results(per_replica))
    if local_replicas > 1:
        per_replica = on_each_replica(1.0 / local_replicas)
    return strategy.reduce("SUM", per_replica, axis=None).numpy().tolist()


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
