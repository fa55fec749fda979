"""``GPUMonitor``: a Keras callback that logs hardware statistics to TensorBoard, per epoch and
per window inside an epoch.

The callback is a thin adapter: sampling lives in :mod:`tfthroughput.hardware.sampler`, turning
statistics into scalars and writing them in :mod:`tfthroughput.monitor.events`, an epoch's
windows in :mod:`tfthroughput.monitor.epoch_windows`, watching the ``fit`` in
:mod:`tfthroughput.monitor.fit_watch`. This module holds the settings and the Keras hooks.

Its batch hooks, ``on_train_batch_end``, ``on_test_batch_end`` and ``on_predict_batch_end``,
are ``async_safe``: on the backends where Keras dispatches callbacks asynchronously (JAX,
PyTorch) they run on Keras's callback thread and never make the loop wait for a step; with
TensorFlow, Keras calls every batch-end hook in line and converts the step's logs to numbers
anyway, so the hooks add only their own few instructions. With ``update_freq="epoch"`` (the
default) the training one only notes the step, so that an epoch cut short is written at the
step where it stopped; the validation and inference ones count batches.

The step a time-based window is written at also comes from that hook, not from the sampler
thread: see :mod:`tfthroughput.monitor.live_run`.
"""

from __future__ import annotations

import copy
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence

import keras

from tfthroughput._validation import check_bool, check_folder_name, check_positive_int
from tfthroughput.hardware.discovery import default_sources
from tfthroughput.hardware.metrics import validate_metric_names
from tfthroughput.hardware.sampler import validate_interval
from tfthroughput.hardware.source import MonitoringWarning, Source
from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.batch_count import BatchCounter, attach_to_fit
from tfthroughput.monitor.epoch_windows import Window
from tfthroughput.monitor.event_writer import create_new_file
from tfthroughput.monitor.events import (
    VALIDATION_LOGS_PREFIX,
    logs_entries,
)
from tfthroughput.monitor.execution_check import warn_partial_execution
from tfthroughput.monitor.fit_watch import find_fit, fit_locals
from tfthroughput.monitor.inference_calls import InferenceCalls
from tfthroughput.monitor.input_activity import SOURCE_NAME as INPUT_ACTIVITY_SOURCE
from tfthroughput.monitor.live_run import LiveRun
from tfthroughput.monitor.run_start import RunSettings, start_run
from tfthroughput.monitor.settings import (
    LOGGED_STATISTICS,
    check_log_dir,
    check_source_factory,
    check_statistics,
    check_update_freq,
)
from tfthroughput.monitor.steps import optimizer_steps, trained_steps
from tfthroughput.monitor.strategy import (
    call_batch_size,
    find_placement,
    global_batch_size,
)
from tfthroughput.sinks.sink import Sink, check_sinks


class GPUMonitor(keras.callbacks.Callback):
    """Samples GPU and host metrics during ``fit``, ``evaluate`` and ``predict`` and writes their
    statistics to TensorBoard, each phase on its own.

    Writes into ``<log_dir>/<run_name>``; give it the same ``log_dir`` as
    ``keras.callbacks.TensorBoard`` and the hardware charts sit beside the loss curves.
    Per-epoch values are logged with ``step=epoch``, so a run resumed with ``initial_epoch``
    lines up. With ``update_freq`` set, the monitor also writes each window inside the epoch
    as it ends, with ``step`` the optimizer steps completed (``model.optimizer.iterations``),
    the x-axis of Keras's batch-level charts, continuing across epochs and resumed runs.

    Phases: an epoch's training steps and its validation are measured apart. The training part
    runs from the epoch's start to Keras's ``on_test_begin`` (the epoch's end without
    validation); its figures and hardware statistics are the epoch's untagged ones, the
    validation's are under ``validation/``, and ``epoch/wall_seconds`` is the whole epoch.
    Passed to ``model.evaluate`` or ``model.predict`` (with or without a ``fit`` before), the
    monitor measures each call on its own, in the run ``<run_name>/evaluate`` or
    ``<run_name>/predict``, every tag under ``evaluate/`` or ``predict/``, at ``step`` = the
    calls of that kind it measured before (windows: at the batches of such calls so far).

    Tags (every one with its unit in docs/tags.md): ``<source>/<metric>/<statistic>``, e.g.
    ``gpu0/utilization_percent/mean`` or ``host/cpu_percent/p95``, with sample counts, energy
    and ``gpu<i>/busy_but_idle_percent`` (GPU-Util minus SM activity, where GPM is read; far
    apart, one ``MonitoringWarning`` per ``fit`` says GPU-Util overstates the work);
    ``epoch/seconds`` (training time), ``epoch/steps_per_second``,
    ``epoch/examples_per_second``, ``epoch/joules_per_example``, ``epoch/wall_seconds``; the
    same under ``validation/``, ``window/``, ``evaluate/`` and ``predict/``.

    It works under every Keras 3 backend (TensorFlow, JAX, PyTorch) and needs no TensorFlow:
    events go through TensorBoard's own writer, steps come from the optimizer's iteration
    counter.

    The run also gets a Custom Scalars layout listing only the sources and metrics it has,
    written once the first window or epoch has shown them
    (:mod:`tfthroughput.monitor.dashboard`).

    Under a ``tf.distribute`` strategy (model built in ``strategy.scope()``) it samples every
    GPU of the process, so every local replica's, and counts examples with the global batch.
    Under MultiWorkerMirroredStrategy each worker writes ``<log_dir>/<run_name>/<task_type>_
    <index>``, the workers exchange a summary at each epoch end, and the chief writes
    ``<log_dir>/cluster`` (see :mod:`tfthroughput.monitor.cluster_summary`); every worker must
    run a GPUMonitor.

    The monitor is a value until ``fit`` (or ``evaluate``, ``predict``) starts it: nothing live
    (thread, lock, writer) exists before ``on_train_begin`` (``on_test_begin``,
    ``on_predict_begin``), and ``copy.deepcopy`` (as KerasTuner does for every trial) gives
    an unstarted monitor with the same settings. Outside ``fit`` (hooks driven by hand), use it
    as a context manager or call :meth:`close` when done.

    Args:
        log_dir: TensorBoard log directory. Defaults to ``"logs"``.
        interval: Seconds between samples. Defaults to 1.0; at least 0.05.
        update_freq: When to write windows inside an epoch (or an ``evaluate`` or ``predict``
            call), Keras's name for it: ``"epoch"`` (no windows), an int (every that many
            training steps, or batches of the call; the window's end reads the
            sources once, so it has a value even when shorter than ``interval``), or a
            duration with its unit, ``"30s"``, ``"5min"``, ``"1h"`` (cut on the sampler thread
            after the first sample past the duration, once a step has been taken; at least
            ``interval``). The epoch's end ends the last window. Defaults to ``"epoch"``.
        hardware_metrics: Hardware metric names to sample (see ``tfthroughput.hardware.metrics``);
            defaults to all. (Named apart from Keras's ``compile(metrics=...)``.)
        statistics: Which of ``mean``, ``min``, ``max``, ``p95`` to log. Defaults to all four.
        batch_size: Examples per step across every replica (the global batch), for
            ``epoch/examples_per_second``. Defaults to None: read from the ``fit`` (arrays,
            and ``tf.data`` pipelines with a constant batch size), with one
            ``MonitoringWarning`` when it cannot be read. The validation and inference
            calls use the batch read from their own data, else this.
        update_logs: Also put each metric's epoch mean into ``logs`` as ``<source>_<metric>``
            (e.g. ``gpu0_utilization_percent``) and the epoch figures as ``seconds``,
            ``steps_per_second``, ``examples_per_second``, ``wall_seconds``, and the
            validation's under Keras's ``val_`` prefix (``val_seconds``,
            ``val_gpu0_utilization_percent``), for ``History``, ``CSVLogger`` and
            ``keras.callbacks.TensorBoard`` (which logs them as ``epoch_<key>``, the ``val_``
            ones in its validation run). Only callbacks listed after the monitor see them.
            Defaults to False.
        run_name: Sub-directory of ``log_dir`` (the TensorBoard run). Defaults to
            ``"hardware"``.
        sources: Zero-argument callable returning the sources to sample, called at each
            ``on_train_begin``. Defaults to the host plus every visible GPU through NVML.
        clock: Monotonic seconds, for the wall time of epochs and windows. Defaults to
            ``time.monotonic``.
        sinks: More places each window's and each epoch's figures go, besides the event
            files: e.g. ``[tfthroughput.sinks.MLflowSink(), PrometheusSink(port=9400)]``, or
            your own :class:`tfthroughput.sinks.Sink` (``docs/sinks.md``). Defaults to None.

    Raises:
        TypeError, ValueError: For invalid arguments, naming the argument and value.

    Example:
        >>> monitor = GPUMonitor(log_dir="logs/run1", update_freq="30s", batch_size=64)
        >>> model.fit(dataset, epochs=3, validation_data=val, callbacks=[monitor])  # doctest: +SKIP
        >>> model.predict(test_images, callbacks=[monitor])  # doctest: +SKIP
    """

    # Keras may run `on_train_batch_end` on its callback thread (see the module docstring).
    async_safe = True
    # Creates each event file; a seam where tests inject file-system faults (in a subclass).
    _create_event_file = staticmethod(create_new_file)

    def __init__(
        self,
        log_dir: str | os.PathLike = "logs",
        interval: float = 1.0,
        *,
        update_freq: int | str = "epoch",
        hardware_metrics: Iterable[str] | None = None,
        statistics: Sequence[str] = LOGGED_STATISTICS,
        batch_size: int | None = None,
        update_logs: bool = False,
        run_name: str = "hardware",
        sources: Callable[[], Iterable[Source]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sinks: Sequence[Sink] | None = None,
    ) -> None:
        super().__init__()
        self.log_dir = check_log_dir(log_dir)
        self.interval = validate_interval(interval)
        self._update = check_update_freq(update_freq, self.interval)
        self.update_freq = update_freq
        self.hardware_metrics = validate_metric_names(hardware_metrics, "hardware_metrics")
        self.statistics = check_statistics(statistics)
        self.batch_size = check_positive_int("batch_size", batch_size, allow_none=True)
        self.update_logs = check_bool("update_logs", update_logs)
        check_folder_name("run_name", run_name)
        self.run_name = run_name
        check_source_factory(sources)
        self._source_factory = sources
        self._clock = clock
        self.sinks = check_sinks(sinks)
        self._training: LiveRun | None = None
        self._batch_count: BatchCounter | None = None  # counts a PyDataset's or generator's
        self._calls = InferenceCalls()  # evaluate and predict outside fit
        self._iterations_at_epoch_start: int | None = None
        self._last_batch: int | None = None  # of the epoch in progress
        self._entered = False
        self._worker_folder: str | None = None  # `<task_type>_<index>` in a cluster
        # The last window step an earlier fit wrote, for a fit that resumes below it.
        self._written_through: int | None = None

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
        fit_call = find_fit()
        if fit_call is None and not self._entered:
            warnings.warn(
                "GPUMonitor found no Keras `fit` calling it (a hand-written training loop?), "
                "so it cannot tell if training stops without `on_train_end`: use it as "
                "`with monitor:` or call `monitor.close()` when done.",
                MonitoringWarning,
                stacklevel=2,
            )
        batch_size = self._input_batch_size(fit_call)
        training = start_run(
            self._run_settings(),
            self.run_dir,
            fit_call,
            batch_size=batch_size,
            on_abandoned=self._abandon,
            on_sample=self._window_tick,
            placement=placement,
            sinks=self.sinks,
        )
        training.written_through = self._written_through
        self._training = training
        training.sampler.start()

    def on_epoch_begin(self, epoch, logs=None):
        training = self._training
        if training is None:
            return
        self._iterations_at_epoch_start = optimizer_steps(self.model)
        self._last_batch = None
        steps = self.params.get("steps") if self.params else None
        training.begin_epoch(epoch, self._iterations_at_epoch_start, steps)

    def on_train_batch_end(self, batch, logs=None):
        self._last_batch = batch
        training = self._training
        if training is not None:
            training.batch_end(batch)

    def on_epoch_end(self, epoch, logs=None):
        training = self._training
        if training is None:
            return
        if self._batch_count is not None:  # a PyDataset or generator: this epoch's batches
            training.batch_size = self._batch_count.take_epoch_batch_size() or training.batch_size
        parts = training.end_epoch(epoch, self._steps_this_epoch())
        figures = parts.training_figures()
        if self.update_logs and logs is not None:
            logs.update(logs_entries(parts.training.stats, figures))
            if parts.validation is not None:
                validation = parts.validation
                logs.update(
                    logs_entries(
                        validation.stats, validation.figures(), prefix=VALIDATION_LOGS_PREFIX
                    )
                )

    def on_train_end(self, logs=None):
        self._shutdown()

    # Validation inside fit, and evaluate and predict on their own ---------------------------
    # An epoch's validation ends the epoch's training part (tfthroughput.monitor.epoch_parts);
    # `evaluate` and `predict` outside `fit` are each measured as a call of their own, written
    # into `<run_dir>/evaluate` or `<run_dir>/predict` (tfthroughput.monitor.inference_calls).

    def on_test_begin(self, logs=None):
        training = self._training
        if training is not None and training.windows is not None:
            # Reading the step count waits for the training steps dispatched so far, so the
            # training part's time covers their execution.
            step = optimizer_steps(self.model)
            if training.begin_validation(step, call_batch_size("evaluate", self.batch_size)):
                return
        self._begin_call("evaluate")

    def on_test_batch_end(self, batch, logs=None):
        training = self._training
        validation = None if training is None else training.validation
        if validation is not None:
            validation.batch_end(batch)
        else:
            self._calls.batch_end(batch)

    def on_test_end(self, logs=None):
        training = self._training
        if training is not None and training.validation is not None:
            training.end_validation()
        else:
            self._calls.end("evaluate", self.params)

    def on_predict_begin(self, logs=None):
        self._begin_call("predict")

    def on_predict_batch_end(self, batch, logs=None):
        self._calls.batch_end(batch)

    def on_predict_end(self, logs=None):
        self._calls.end("predict", self.params)

    # Windows, for readers such as DipTrigger ----------------------------------------------

    @property
    def window_count(self) -> int:
        """Windows ended so far in the ``fit`` in progress (one per epoch without
        ``update_freq``); 0 outside ``fit``."""
        training = self._training
        return 0 if training is None else training.window_count

    def windows_since(self, index: int) -> tuple[Window, ...]:
        """The ``fit``'s windows from number ``index`` on (of the last 1000), oldest first.

        Safe to call from any thread; cheap when nothing is new (compare
        :attr:`window_count` first).

        Example:
            >>> GPUMonitor().windows_since(0)  # outside fit
            ()
        """
        training = self._training
        return () if training is None else training.windows_since(index)

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
            "_batch_count": None,
            "_calls": InferenceCalls(),
            "_entered": False,
            "_model": None,
            "params": None,
            "_iterations_at_epoch_start": None,
            "_last_batch": None,
            "_worker_folder": None,
            "_written_through": None,
        }
        for name, value in vars(self).items():
            clone.__dict__[name] = unstarted[name] if name in unstarted else copy_value(value)
        return clone

    def _steps_this_epoch(self) -> int | None:
        now = optimizer_steps(self.model)
        if now is not None and self._iterations_at_epoch_start is not None:
            epoch = self.params.get("steps") if self.params else None
            spe = getattr(self.model, "steps_per_execution", 1)
            iterations = now - self._iterations_at_epoch_start
            return trained_steps(iterations, self._last_batch, epoch, spe)
        return self.params.get("steps") if self.params else None

    def _selected(self, stats: WindowStats) -> WindowStats:
        if self.hardware_metrics is None:
            return stats
        # The input-activity source exists only for the cluster exchange: always kept.
        return stats.only(
            lambda key: key.metric in self.hardware_metrics or key.source == INPUT_ACTIVITY_SOURCE
        )

    def _run_settings(self) -> RunSettings:
        return RunSettings(
            log_dir=self.log_dir,
            interval=self.interval,
            update=self._update,
            statistics=self.statistics,
            clock=self._clock,
            select=self._selected,
            sources=self._source_factory or (lambda: default_sources(self.hardware_metrics)),
            create_file=self._create_event_file,
        )

    def _begin_call(self, phase: str) -> None:
        """``evaluate`` or ``predict`` outside ``fit``: measure the call on its own."""
        call = find_fit(phase)
        self._calls.begin(
            phase,
            lambda: start_run(
                self._run_settings(),
                os.path.join(self.run_dir, phase),
                call,
                batch_size=call_batch_size(phase, self.batch_size),
                on_abandoned=self._abandon,
                on_sample=self._window_tick,
                phase=phase,
            ),
            self.params.get("steps") if self.params else None,
        )

    def _window_tick(self, run: LiveRun) -> None:
        """On the sampler thread after each sample, with time-based windows."""
        run.sampled()

    def _abandon(self, run: LiveRun) -> None:
        """On the sampler thread, once ``fit`` (or the ``evaluate`` or ``predict`` call) has
        been left without its end hook."""
        if run.phase is not None:
            self._calls.abandoned(run)
            return
        run.finish()
        self._written_through = run.written_through
        if self._training is run:
            self._training = None  # release the sampler and its sources with it

    def _input_batch_size(self, fit_call: object) -> float | None:
        """Examples per step of this fit (and its checks of the input and the epoch)."""
        if fit_call is not None:
            found = fit_locals("steps_per_epoch")
            warn_partial_execution(
                found.get("steps_per_epoch"), getattr(self.model, "steps_per_execution", 1)
            )
        if self.batch_size is None and fit_call is not None:
            self._batch_count = attach_to_fit()
        if self._batch_count is not None:
            return self._batch_count.first_batch_size
        return global_batch_size(self.batch_size, in_fit=fit_call is not None)

    def _shutdown(self) -> None:
        if self._batch_count is not None:
            self._batch_count.detach()
            self._batch_count = None
        self._calls.close()
        training, self._training = self._training, None
        if training is not None:
            training.sampler.stop()  # joins the thread, so an abandon in progress ends first
            training.finish()
            self._written_through = training.written_through
