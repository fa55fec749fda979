"""``GPUMonitor``: a Keras callback that logs per-epoch hardware statistics to TensorBoard.

The callback is a thin adapter: sampling lives in :mod:`tfthroughput.hardware.sampler`; this module
only turns each epoch's statistics into ``tf.summary`` scalars (and, optionally, ``logs``).
It overrides no batch hook, so Keras keeps dispatching training steps asynchronously.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from types import FrameType

import keras
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.scalar.summary import scalar_pb

from tfthroughput._validation import check_positive_int
from tfthroughput.hardware.discovery import default_sources
from tfthroughput.hardware.metrics import validate_metric_names
from tfthroughput.hardware.sampler import SampleKey, Sampler, validate_interval
from tfthroughput.hardware.source import MonitoringWarning, Source
from tfthroughput.hardware.stats import STATISTIC_NAMES, MetricStats
from tfthroughput.monitor.dashboard import write_layout

LOGGED_STATISTICS = ("mean", "min", "max", "p95")
_EPOCH_TAGS = (
    "epoch/seconds",
    "epoch/steps_per_second",
    "epoch/examples_per_second",
    "epoch/joules_per_example",
)


class GPUMonitor(keras.callbacks.Callback):
    """Samples GPU and host metrics during ``fit`` and writes per-epoch statistics to TensorBoard.

    Writes into ``<log_dir>/<run_name>``; give it the same ``log_dir`` as
    ``keras.callbacks.TensorBoard`` and the hardware charts sit beside the loss curves. Every
    value is logged with ``step=epoch``, so a run resumed with ``initial_epoch`` lines up.

    Tags (units in the README):
        ``<source>/<metric>/<statistic>``: e.g. ``gpu0/utilization_percent/mean``,
        ``host/cpu_percent/p95``; ``<source>`` is ``gpu<i>`` (TensorFlow's ``/GPU:<i>``) or
        ``host``. ``<source>/samples``: samples in the epoch. ``gpu<i>/energy_joules``: energy
        used in the epoch. ``epoch/seconds``, ``epoch/steps_per_second`` and, given
        ``batch_size``, ``epoch/examples_per_second`` and ``epoch/joules_per_example``.

    Args:
        log_dir: TensorBoard log directory. Defaults to ``"logs"``.
        interval: Seconds between samples. Defaults to 1.0; at least 0.05.
        metrics: Metric names to sample (see ``tfthroughput.hardware.metrics``); defaults to all.
        statistics: Which of ``mean``, ``min``, ``max``, ``p95`` to log. Defaults to all four.
        batch_size: Examples per step, for ``epoch/examples_per_second``. Keras 3 does not tell
            callbacks the batch size, so it is logged only when given. Defaults to None.
        update_logs: Also put each metric's epoch mean into ``logs`` as
            ``<source>_<metric>`` (and the ``epoch/*`` values as ``epoch_seconds``, ...), for
            ``History`` and ``CSVLogger``. Defaults to False.
        run_name: Sub-directory of ``log_dir`` (the TensorBoard run). Defaults to
            ``"hardware"``.
        sources: Zero-argument callable returning the sources to sample, called at each
            ``on_train_begin``. Defaults to the host plus every visible GPU through NVML.

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
        self._sampler: Sampler | None = None
        self._writer = None
        self._epoch: int | None = None
        self._epoch_start = 0.0
        self._iterations_at_epoch_start: int | None = None
        self._state_lock = threading.Lock()

    @property
    def run_dir(self) -> str:
        """Where the event files go: ``<log_dir>/<run_name>``."""
        return os.path.join(self.log_dir, self.run_name)

    # Keras hooks ---------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self._shutdown()  # a previous fit that ended abnormally may have left state behind
        self._writer = self._open_writer()
        factory = self._source_factory or (lambda: default_sources(self.metrics))
        keep_running = _still_running(_training_frame())
        self._sampler = Sampler(
            factory(),
            self.interval,
            keep_running=keep_running,
            on_abandoned=self._flush_abandoned,
            clock=self._clock,
        ).start()
        self._epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._epoch_start = self._clock()
        self._iterations_at_epoch_start = self._optimizer_iterations()
        if self._sampler is not None:
            self._sampler.collect()  # drop samples taken between epochs

    def on_epoch_end(self, epoch, logs=None):
        if self._sampler is None:
            return
        stats = self._sampler.collect(sample_now=True)
        seconds = self._clock() - self._epoch_start
        scalars = self._write_epoch(epoch, stats, seconds)
        self._epoch = None
        if self.update_logs and logs is not None:
            for key, metric_stats in self._selected(stats).items():
                logs[f"{key.source}_{key.metric}"] = metric_stats.mean
            for key, total in getattr(stats, "totals", {}).items():
                logs[f"{key.source}_{key.metric}"] = total.amount
            for tag in _EPOCH_TAGS:
                if tag in scalars:
                    logs[tag.replace("/", "_")] = scalars[tag]

    def on_train_end(self, logs=None):
        self._shutdown()

    # Internals -----------------------------------------------------------------------------

    def _open_writer(self):
        run_dir = self.run_dir
        try:
            os.makedirs(run_dir, exist_ok=True)
            with tempfile.TemporaryFile(dir=run_dir):
                pass
        except OSError as error:
            raise ValueError(
                f"`log_dir` is not writable ({error.strerror or error}); GPUMonitor needs to "
                f"create {run_dir!r}. Received: log_dir={self.log_dir!r}"
            ) from error
        writer = tf.summary.create_file_writer(run_dir)
        write_layout(writer)
        return writer

    def _optimizer_iterations(self) -> int | None:
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        if iterations is None:
            return None
        try:
            return int(iterations.numpy())
        except Exception:  # noqa: BLE001 - fall back to Keras's own step count
            return None

    def _steps_this_epoch(self) -> int | None:
        now = self._optimizer_iterations()
        if now is not None and self._iterations_at_epoch_start is not None:
            return now - self._iterations_at_epoch_start
        return self.params.get("steps") if self.params else None

    def _selected(self, stats: dict[SampleKey, MetricStats]) -> dict[SampleKey, MetricStats]:
        if self.metrics is None:
            return stats
        return {key: value for key, value in stats.items() if key.metric in self.metrics}

    def _write_epoch(
        self, epoch: int, stats: dict[SampleKey, MetricStats], seconds: float | None
    ) -> dict[str, float]:
        """Write one epoch's scalars; returns them (also when writing failed)."""
        scalars: dict[str, float] = {}
        samples_per_source: dict[str, int] = {}
        buffer_samples = getattr(stats, "buffer_samples", {})
        for key, metric_stats in self._selected(stats).items():
            for statistic in self.statistics:
                scalars[f"{key.source}/{key.metric}/{statistic}"] = getattr(metric_stats, statistic)
            if key in buffer_samples:  # NVML's own samples: their count, not the reads
                scalars[f"{key.source}/{key.metric}/samples"] = buffer_samples[key]
                continue
            samples_per_source[key.source] = max(
                samples_per_source.get(key.source, 0), metric_stats.count
            )
        for source, count in samples_per_source.items():
            scalars[f"{source}/samples"] = count
        totals = getattr(stats, "totals", {})  # energy: an increase over the epoch
        for key, total in totals.items():
            scalars[f"{key.source}/{key.metric}"] = total.amount
            scalars[f"{key.source}/{key.metric}/from_counter"] = float(total.counter)
        if seconds is not None and seconds > 0:
            scalars["epoch/seconds"] = seconds
            steps = self._steps_this_epoch()
            if steps:
                scalars["epoch/steps_per_second"] = steps / seconds
                if self.batch_size:
                    scalars["epoch/examples_per_second"] = steps * self.batch_size / seconds
                    joules = [t.amount for k, t in totals.items() if k.metric == "energy_joules"]
                    if joules:
                        scalars["epoch/joules_per_example"] = sum(joules) / (
                            steps * self.batch_size
                        )
        with self._state_lock:
            writer = self._writer
            if writer is None:
                return scalars
            try:
                # One raw summary holding every scalar: one write op instead of one per tag
                # (about 8x cheaper at the end of each epoch than tf.summary.scalar per tag).
                summary = summary_pb2.Summary()
                for tag, value in scalars.items():
                    summary.value.extend(scalar_pb(tag, value).value)
                with writer.as_default():
                    tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=epoch)
                writer.flush()
            except Exception as error:  # noqa: BLE001 - a writer fault must not stop training
                warnings.warn(
                    f"GPUMonitor could not write epoch {epoch} to {self.run_dir!r}: {error!r}",
                    MonitoringWarning,
                    stacklevel=2,
                )
        return scalars

    def _flush_abandoned(self) -> None:
        """Runs on the sampler thread when ``fit`` has exited without ``on_train_end``."""
        sampler = self._sampler
        if sampler is not None and self._epoch is not None:
            self._write_epoch(self._epoch, sampler.collect(), seconds=None)
        self._epoch = None
        self._close_writer()

    def _shutdown(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop()
            if self._epoch is not None:  # fit ended inside an epoch: keep what was sampled
                self._write_epoch(self._epoch, sampler.collect(), seconds=None)
        self._close_writer()

    def _close_writer(self) -> None:
        with self._state_lock:
            writer, self._writer = self._writer, None
            if writer is not None:
                try:
                    writer.close()
                except Exception as error:  # noqa: BLE001
                    warnings.warn(
                        f"GPUMonitor could not close its writer: {error!r}",
                        MonitoringWarning,
                        stacklevel=2,
                    )


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


def _training_frame() -> FrameType | None:
    """The frame of the Keras ``fit`` that is calling us, if any."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "fit" and frame.f_globals.get("__name__", "").startswith(
            "keras"
        ):
            return frame
        frame = frame.f_back
    return None


def _still_running(fit_frame: FrameType | None) -> Callable[[], bool] | None:
    """A predicate that is False once ``fit`` has left its frame (e.g. on an exception).

    Keras 3 calls no callback hook when ``fit`` raises, so the sampler thread watches the
    training thread's stack instead: cheap (a short frame walk per sample) and exact.
    """
    if fit_frame is None:
        return None
    thread_id = threading.get_ident()

    def fit_is_running() -> bool:
        frame = sys._current_frames().get(thread_id)
        while frame is not None:
            if frame is fit_frame:
                return True
            frame = frame.f_back
        return False

    return fit_is_running
