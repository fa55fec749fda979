"""``GPUMonitor``: a Keras callback that logs per-epoch hardware statistics to TensorBoard.

The callback is a thin adapter: sampling lives in :mod:`tfthroughput.hardware.sampler`, turning
statistics into scalars and writing them in :mod:`tfthroughput.monitor.events`, watching the
``fit`` in :mod:`tfthroughput.monitor.fit_watch`. This module holds the settings and the Keras
hooks. It overrides no batch hook, so Keras keeps dispatching training steps asynchronously.
"""

from __future__ import annotations

import copy
import functools
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence

import keras

from tfthroughput._validation import check_positive_int
from tfthroughput.hardware.discovery import default_sources
from tfthroughput.hardware.metrics import validate_metric_names
from tfthroughput.hardware.sampler import SampleKey, Sampler, validate_interval
from tfthroughput.hardware.source import MonitoringWarning, Source
from tfthroughput.hardware.stats import STATISTIC_NAMES, MetricStats
from tfthroughput.monitor.cluster import ClusterExchange
from tfthroughput.monitor.events import (
    EventWriter,
    epoch_figures,
    hardware_scalars,
    logs_entries,
)
from tfthroughput.monitor.fit_watch import find_fit
from tfthroughput.monitor.input_activity import InputActivitySource
from tfthroughput.monitor.strategy import find_placement, global_batch_size

LOGGED_STATISTICS = ("mean", "min", "max", "p95")


class _Training:
    """Everything live during one ``fit``: made in ``on_train_begin``, dropped when it ends."""

    def __init__(self, writer: EventWriter) -> None:
        self.writer = writer
        self.sampler: Sampler  # set right after, as it calls back with this object
        self.epoch: int | None = None  # the epoch in progress, if any
        self.epoch_start = 0.0
        self.iterations_at_epoch_start: int | None = None
        self.finished = False
        self.batch_size: int | None = None  # global: examples per step across every replica
        self.cluster: ClusterExchange | None = None  # under MultiWorkerMirroredStrategy


class GPUMonitor(keras.callbacks.Callback):
    """Samples GPU and host metrics during ``fit`` and writes per-epoch statistics to TensorBoard.

    Writes into ``<log_dir>/<run_name>``; give it the same ``log_dir`` as
    ``keras.callbacks.TensorBoard`` and the hardware charts sit beside the loss curves. Every
    value is logged with ``step=epoch``, so a run resumed with ``initial_epoch`` lines up.

    Tags (units in the README):
        ``<source>/<metric>/<statistic>``: e.g. ``gpu0/utilization_percent/mean``,
        ``host/cpu_percent/p95``; ``<source>`` is ``gpu<i>`` (TensorFlow's ``/GPU:<i>``) or
        ``host``. ``<source>/samples``: samples in the epoch. ``epoch/seconds``,
        ``epoch/steps_per_second`` and, when the batch size is known,
        ``epoch/examples_per_second``.

    Under a ``tf.distribute`` strategy (model built in ``strategy.scope()``) it samples every
    GPU of the process, so every local replica's, and counts examples with the global batch.
    Under MultiWorkerMirroredStrategy each worker writes ``<log_dir>/<run_name>/<task_type>_
    <index>``, the workers exchange a summary at each epoch end, and the chief writes
    ``<log_dir>/cluster`` (see :mod:`tfthroughput.monitor.cluster_summary`); every worker must
    run a GPUMonitor.

    The monitor is a value until ``fit`` starts it: nothing live (thread, lock, writer) exists
    before ``on_train_begin``, and ``copy.deepcopy`` (as KerasTuner does for every trial) gives
    an unstarted monitor with the same settings. Outside ``fit`` (hooks driven by hand), use it
    as a context manager or call :meth:`close` when done.

    Args:
        log_dir: TensorBoard log directory. Defaults to ``"logs"``.
        interval: Seconds between samples. Defaults to 1.0; at least 0.05.
        metrics: Metric names to sample (see ``tfthroughput.hardware.metrics``); defaults to all.
        statistics: Which of ``mean``, ``min``, ``max``, ``p95`` to log. Defaults to all four.
        batch_size: Examples per step across every replica (the global batch), for
            ``epoch/examples_per_second``. Defaults to None: read from the ``fit`` (arrays,
            and ``tf.data`` pipelines with a constant batch size), with one
            ``MonitoringWarning`` when it cannot be read.
        update_logs: Also put each metric's epoch mean into ``logs`` as ``<source>_<metric>``
            (e.g. ``gpu0_utilization_percent``) and the epoch figures as ``seconds``,
            ``steps_per_second``, ``examples_per_second``, for ``History``, ``CSVLogger`` and
            ``keras.callbacks.TensorBoard`` (which logs them as ``epoch_<key>``). Only
            callbacks listed after the monitor see them. Defaults to False.
        run_name: Sub-directory of ``log_dir`` (the TensorBoard run). Defaults to
            ``"hardware"``.
        sources: Zero-argument callable returning the sources to sample, called at each
            ``on_train_begin``. Defaults to the host plus every visible GPU through NVML.
        clock: Monotonic seconds, for the epoch's wall time. Defaults to ``time.monotonic``.

    Raises:
        TypeError, ValueError: For invalid arguments, naming the argument and value.

    Example:
        >>> monitor = GPUMonitor(log_dir="logs/run1", interval=0.5, batch_size=64)
        >>> model.fit(dataset, epochs=3, callbacks=[monitor])  # doctest: +SKIP
    """

    def __init__(
        self,
        log_dir: str | os.PathLike = "logs",
        interval: float = 1.0,
        *,
        metrics: Iterable[str] | None = None,
        statistics: Sequence[str] = LOGGED_STATISTICS,
        batch_size: int | None = None,
        update_logs: bool = False,
        run_name: str = "hardware",
        sources: Callable[[], Iterable[Source]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"`log_dir` must be a path. Received: log_dir={log_dir!r}")
        self.interval = validate_interval(interval)
        self.metrics = validate_metric_names(metrics)
        self.statistics = _validate_statistics(statistics)
        check_positive_int("batch_size", batch_size, allow_none=True)
        if not isinstance(update_logs, bool):
            raise TypeError(f"`update_logs` must be a bool. Received: update_logs={update_logs!r}")
        if not isinstance(run_name, str) or not run_name or os.sep in run_name:
            raise ValueError(
                f"`run_name` must be a non-empty folder name. Received: run_name={run_name!r}"
            )
        if sources is not None and not callable(sources):
            raise TypeError(
                "`sources` must be a zero-argument callable returning sources. "
                f"Received: sources={sources!r}"
            )
        self.log_dir = os.fspath(log_dir)
        self.batch_size = batch_size
        self.update_logs = update_logs
        self.run_name = run_name
        self._source_factory = sources
        self._clock = clock
        self._training: _Training | None = None
        self._entered = False
        self._worker_folder: str | None = None  # `<task_type>_<index>` in a cluster

    @property
    def run_dir(self) -> str:
        """Where the event files go: ``<log_dir>/<run_name>``, or
        ``<log_dir>/<run_name>/<task_type>_<index>`` on each worker of a
        MultiWorkerMirroredStrategy cluster (known once ``fit`` has started)."""
        return os.path.join(self.log_dir, self.run_name, *filter(None, [self._worker_folder]))

    # Keras hooks ---------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self._shutdown()  # a previous run driven by hand may still be open
        placement = find_placement(self.model)
        self._worker_folder = placement.worker_name
        writer = EventWriter(self.run_dir, self.log_dir)
        fit_call = find_fit()
        if fit_call is None and not self._entered:
            warnings.warn(
                "GPUMonitor found no Keras `fit` calling it (a hand-written training loop?), "
                "so it cannot tell if training stops without `on_train_end`: use it as "
                "`with monitor:` or call `monitor.close()` when done.",
                MonitoringWarning,
                stacklevel=2,
            )
        factory = self._source_factory or (lambda: default_sources(self.metrics))
        training = _Training(writer)
        training.batch_size = global_batch_size(self.batch_size, in_fit=fit_call is not None)
        try:
            extra: list[Source] = []
            if placement.multi_worker:  # the cluster exchange, and whether input runs Python
                extra.append(InputActivitySource())
                training.cluster = ClusterExchange(placement, self.log_dir)
            training.sampler = Sampler(
                [*factory(), *extra],
                self.interval,
                keep_running=None if fit_call is None else fit_call.is_running,
                on_abandoned=functools.partial(self._abandon, training),
            )
        except BaseException:
            writer.close()
            if training.cluster is not None:
                training.cluster.close()
            raise
        self._training = training
        training.sampler.start()

    def on_epoch_begin(self, epoch, logs=None):
        training = self._training
        if training is None:
            return
        training.epoch = epoch
        training.epoch_start = self._clock()
        training.iterations_at_epoch_start = self._optimizer_iterations()
        training.sampler.collect()  # drop samples taken between epochs

    def on_epoch_end(self, epoch, logs=None):
        training = self._training
        if training is None:
            return
        sampled = training.sampler.collect(sample_now=True)
        stats = self._selected(sampled)
        figures = epoch_figures(
            self._clock() - training.epoch_start,
            self._steps_this_epoch(training),
            training.batch_size,
        )
        training.writer.write(epoch, hardware_scalars(stats, self.statistics, figures))
        if training.cluster is not None:  # every worker, every epoch: the others wait for it
            training.cluster.epoch_end(epoch, sampled, figures.get("seconds"))
        training.epoch = None
        if self.update_logs and logs is not None:
            logs.update(logs_entries(stats, figures))

    def on_train_end(self, logs=None):
        self._shutdown()

    # Use outside fit -----------------------------------------------------------------------

    def close(self) -> None:
        """Stop sampling, write what the epoch in progress sampled, and close the writer.

        ``fit`` does this itself (``on_train_end``, or when ``fit`` is left by an exception);
        call it when driving the hooks by hand. Idempotent; the monitor can start again.
        """
        self._shutdown()

    def __enter__(self) -> GPUMonitor:
        self._entered = True
        return self

    def __exit__(self, *exc_info) -> None:
        self._entered = False
        self.close()

    def __deepcopy__(self, memo) -> GPUMonitor:
        return self._unstarted_copy(lambda value: copy.deepcopy(value, memo), memo)

    def __copy__(self) -> GPUMonitor:
        return self._unstarted_copy(lambda value: value, {})

    # Internals -----------------------------------------------------------------------------

    def _unstarted_copy(self, copy_value: Callable[[object], object], memo: dict) -> GPUMonitor:
        """A monitor with this one's settings and none of its live state or Keras binding."""
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        unstarted = {
            "_training": None,
            "_entered": False,
            "_model": None,
            "params": None,
            "_worker_folder": None,
        }
        for name, value in vars(self).items():
            clone.__dict__[name] = unstarted[name] if name in unstarted else copy_value(value)
        return clone

    def _optimizer_iterations(self) -> int | None:
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        if iterations is None:
            return None
        try:
            return int(iterations.numpy())
        except Exception:  # noqa: BLE001 - fall back to Keras's own step count
            return None

    def _steps_this_epoch(self, training: _Training) -> int | None:
        now = self._optimizer_iterations()
        if now is not None and training.iterations_at_epoch_start is not None:
            return now - training.iterations_at_epoch_start
        return self.params.get("steps") if self.params else None

    def _selected(self, stats: dict[SampleKey, MetricStats]) -> dict[SampleKey, MetricStats]:
        if self.metrics is None:
            return stats
        return {key: value for key, value in stats.items() if key.metric in self.metrics}

    def _finish(self, training: _Training) -> None:
        """Write the epoch cut short, if any, and close the writer; once per training."""
        if training.finished:
            return
        training.finished = True
        if training.epoch is not None:  # fit ended inside an epoch: keep what was sampled
            stats = self._selected(training.sampler.collect())
            training.writer.write(training.epoch, hardware_scalars(stats, self.statistics, {}))
            training.epoch = None
        training.writer.close()
        if training.cluster is not None:
            training.cluster.close()

    def _abandon(self, training: _Training) -> None:
        """On the sampler thread, once ``fit`` has been left without ``on_train_end``."""
        self._finish(training)
        if self._training is training:
            self._training = None  # release the sampler and its sources with it

    def _shutdown(self) -> None:
        training, self._training = self._training, None
        if training is not None:
            training.sampler.stop()  # joins the thread, so an abandon in progress ends first
            self._finish(training)


def _validate_statistics(statistics: object) -> tuple[str, ...]:
    if isinstance(statistics, str) or not isinstance(statistics, (list, tuple)):
        raise TypeError(
            f"`statistics` must be a list or tuple of names. Received: statistics={statistics!r}"
        )
    allowed = [name for name in STATISTIC_NAMES if name != "count"]
    unknown = [name for name in statistics if name not in allowed]
    if unknown or not statistics:
        raise ValueError(
            f"`statistics` must be a non-empty subset of {allowed}. "
            f"Received: statistics={statistics!r}"
        )
    return tuple(statistics)
