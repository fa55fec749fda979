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
from tfthroughput.hardware.sampler import Sampler, validate_interval
from tfthroughput.hardware.source import MonitoringWarning, Source
from tfthroughput.hardware.stats import STATISTIC_NAMES
from tfthroughput.hardware.window import WindowStats
from tfthroughput.monitor.events import (
    EventWriter,
    energy_joules,
    epoch_figures,
    hardware_scalars,
    logs_entries,
    overstated_utilization_warning,
)
from tfthroughput.monitor.fit_watch import find_fit

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
        self.warned_overstated_utilization = False


class GPUMonitor(keras.callbacks.Callback):
    """Samples GPU and host metrics during ``fit`` and writes per-epoch statistics to TensorBoard.

    Writes into ``<log_dir>/<run_name>``; give it the same ``log_dir`` as
    ``keras.callbacks.TensorBoard`` and the hardware charts sit beside the loss curves. Every
    value is logged with ``step=epoch``, so a run resumed with ``initial_epoch`` lines up.

    Tags (units in the README):
        ``<source>/<metric>/<statistic>``: e.g. ``gpu0/utilization_percent/mean``,
        ``host/cpu_percent/p95``; ``<source>`` is ``gpu<i>`` (TensorFlow's ``/GPU:<i>``) or
        ``host``. ``<source>/samples``: samples in the epoch. ``gpu<i>/energy_joules``: energy
        used in the epoch. ``gpu<i>/busy_but_idle_percent`` (where GPM's SM activity is read):
        mean GPU-Util minus mean SM activity, clamped at 0; when GPU-Util (above 20 %) is at
        least twice SM activity, one ``MonitoringWarning`` per ``fit`` says that tiny kernels
        make GPU-Util overstate the work. ``epoch/seconds``, ``epoch/steps_per_second`` and,
        given ``batch_size``, ``epoch/examples_per_second`` and ``epoch/joules_per_example``.

    It works under every Keras 3 backend (TensorFlow, JAX, PyTorch) and needs no TensorFlow:
    events go through TensorBoard's own writer, steps come from the optimizer's iteration
    counter.

    The monitor is a value until ``fit`` starts it: nothing live (thread, lock, writer) exists
    before ``on_train_begin``, and ``copy.deepcopy`` (as KerasTuner does for every trial) gives
    an unstarted monitor with the same settings. Outside ``fit`` (hooks driven by hand), use it
    as a context manager or call :meth:`close` when done.

    Args:
        log_dir: TensorBoard log directory. Defaults to ``"logs"``.
        interval: Seconds between samples. Defaults to 1.0; at least 0.05.
        metrics: Metric names to sample (see ``tfthroughput.hardware.metrics``); defaults to all.
        statistics: Which of ``mean``, ``min``, ``max``, ``p95`` to log. Defaults to all four.
        batch_size: Examples per step, for ``epoch/examples_per_second``. Keras 3 does not tell
            callbacks the batch size, so it is logged only when given. Defaults to None.
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

    @property
    def run_dir(self) -> str:
        """Where the event files go: ``<log_dir>/<run_name>``."""
        return os.path.join(self.log_dir, self.run_name)

    # Keras hooks ---------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self._shutdown()  # a previous run driven by hand may still be open
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
        try:
            training.sampler = Sampler(
                factory(),
                self.interval,
                keep_running=None if fit_call is None else fit_call.is_running,
                on_abandoned=functools.partial(self._abandon, training),
            )
        except BaseException:
            writer.close()
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
        stats = self._selected(training.sampler.collect(sample_now=True))
        figures = epoch_figures(
            self._clock() - training.epoch_start,
            self._steps_this_epoch(training),
            self.batch_size,
            joules=energy_joules(stats),
        )
        training.writer.write(epoch, hardware_scalars(stats, self.statistics, figures))
        training.epoch = None
        self._warn_if_utilization_overstates(training, stats, epoch)
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
        unstarted = {"_training": None, "_entered": False, "_model": None, "params": None}
        for name, value in vars(self).items():
            clone.__dict__[name] = unstarted[name] if name in unstarted else copy_value(value)
        return clone

    def _optimizer_iterations(self) -> int | None:
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        if iterations is None:
            return None
        try:
            # Keras's own scalar conversion, on every backend (a torch tensor on a GPU too);
            # without the NumPy round trip that warns about `__array__` under NumPy 2.
            return int(iterations)
        except Exception:  # noqa: BLE001 - fall back to Keras's own step count
            return None

    def _steps_this_epoch(self, training: _Training) -> int | None:
        now = self._optimizer_iterations()
        if now is not None and training.iterations_at_epoch_start is not None:
            return now - training.iterations_at_epoch_start
        return self.params.get("steps") if self.params else None

    def _warn_if_utilization_overstates(
        self, training: _Training, stats: WindowStats, epoch: int
    ) -> None:
        """Once per fit: GPU-Util far above SM activity means tiny kernels, not real work."""
        if training.warned_overstated_utilization:
            return
        message = overstated_utilization_warning(stats, epoch)
        if message is not None:
            training.warned_overstated_utilization = True
            warnings.warn(message, MonitoringWarning, stacklevel=3)

    def _selected(self, stats: WindowStats) -> WindowStats:
        if self.metrics is None:
            return stats
        return stats.only(lambda key: key.metric in self.metrics)

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
