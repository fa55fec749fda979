"""``GPUMonitor``: a Keras callback that logs hardware statistics to TensorBoard, per epoch and
per window inside an epoch.

The callback is a thin adapter: sampling lives in :mod:`tfthroughput.hardware.sampler`, turning
statistics into scalars and writing them in :mod:`tfthroughput.monitor.events`, an epoch's
windows in :mod:`tfthroughput.monitor.epoch_windows`, watching the ``fit`` in
:mod:`tfthroughput.monitor.fit_watch`, starting and ending its runs in
:mod:`tfthroughput.monitor.monitor_lifecycle` (the base class). This module holds the settings,
the Keras hooks and the public methods.

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
from collections.abc import Callable, Iterable, Sequence

from tfthroughput._validation import check_bool, check_folder_name, check_positive_int
from tfthroughput.hardware.metrics import validate_metric_names
from tfthroughput.hardware.sampler import validate_interval
from tfthroughput.hardware.source import Source
from tfthroughput.monitor.epoch_windows import Window
from tfthroughput.monitor.events import VALIDATION_LOGS_PREFIX, logs_entries
from tfthroughput.monitor.monitor_lifecycle import MonitorLifecycle
from tfthroughput.monitor.settings import (
    LOGGED_STATISTICS,
    check_log_dir,
    check_source_factory,
    check_statistics,
    check_update_freq,
)
from tfthroughput.monitor.steps import optimizer_steps
from tfthroughput.monitor.strategy import call_batch_size
from tfthroughput.sinks.sink import Sink, check_sinks


class GPUMonitor(MonitorLifecycle):
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

    Examples are counted batch by batch as the training step takes them, without a device
    sync (a last stage of the ``tf.data`` pipeline Keras feeds the step under TensorFlow; the
    batches' shapes on the host under JAX and PyTorch): ``examples_per_second`` x ``seconds``
    is the examples an epoch or window trained, a short last batch counted for what it holds
    (:mod:`tfthroughput.monitor.example_count`); validation, ``evaluate`` and ``predict``
    batches likewise.

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
        batch_size: Examples per step across every replica (the global batch), used as given
            for every step. Defaults to None: the examples each batch of the ``fit`` holds
            are counted, exactly, for every input (arrays, ``tf.data``, ``PyDataset``,
            generators); where they cannot be, the batch read from the ``fit``, with one
            ``MonitoringWarning`` when that cannot be read either. The validation and
            inference calls use the batch read from their own data, else this.
        input_wait: Measure ``input/wait_percent``, the share of each phase spent waiting for
            the next batch. Under TensorFlow that takes two clock reads and a histogram update
            per batch on the step's thread, and a weighed batch's count beside it on the
            input's prefetch thread: felt by steps of well under a millisecond (a
            launch-bound fit, ``docs/see.md``). ``False`` leaves it
            out; the examples are still counted (under TensorFlow by a stage free to run
            ahead of the step). Defaults to True.
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
        >>> monitor = GPUMonitor(log_dir="logs/run1", update_freq="30s")
        >>> model.fit(dataset, epochs=3, validation_data=val, callbacks=[monitor])  # doctest: +SKIP
        >>> model.predict(test_images, callbacks=[monitor])  # doctest: +SKIP
    """

    # Keras may run `on_train_batch_end` on its callback thread (see the module docstring).
    async_safe = True

    def __init__(
        self,
        log_dir: str | os.PathLike = "logs",
        interval: float = 1.0,
        *,
        update_freq: int | str = "epoch",
        hardware_metrics: Iterable[str] | None = None,
        statistics: Sequence[str] = LOGGED_STATISTICS,
        batch_size: int | None = None,
        input_wait: bool = True,
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
        self.input_wait = check_bool("input_wait", input_wait)
        self.update_logs = check_bool("update_logs", update_logs)
        check_folder_name("run_name", run_name)
        self.run_name = run_name
        check_source_factory(sources)
        self._source_factory = sources
        self._clock = clock
        self.sinks = check_sinks(sinks)
        self._reset_live_state()  # the runs start in on_train_begin (monitor_lifecycle)

    @property
    def run_dir(self) -> str:
        """Where the event files go: ``<log_dir>/<run_name>``, or
        ``<log_dir>/<run_name>/<task_type>_<index>`` on each worker of a
        MultiWorkerMirroredStrategy cluster (known once ``fit`` has started)."""
        return os.path.join(self.log_dir, self.run_name, *filter(None, [self._worker_folder]))

    # Keras hooks ---------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self._start_training()

    def on_epoch_begin(self, epoch, logs=None):
        training = self._training
        if training is None:
            return
        first_step = self._epoch_first_step()
        self._last_batch = None
        steps = self.params.get("steps") if self.params else None
        training.begin_epoch(epoch, first_step, steps)

    def on_train_batch_end(self, batch, logs=None):
        self._last_batch = batch
        training = self._training
        if training is not None:
            training.batch_end(batch)

    def on_epoch_end(self, epoch, logs=None):
        training = self._training
        if training is None:
            return
        parts = training.end_epoch(epoch, self._steps_this_epoch())
        figures = parts.training_figures()
        if self.update_logs and logs is not None:
            training_part = parts.training
            logs.update(
                logs_entries(training_part.stats, figures, wait_percent=training_part.wait_percent)
            )
            if parts.validation is not None:
                validation = parts.validation
                logs.update(
                    logs_entries(
                        validation.stats,
                        validation.figures(),
                        prefix=VALIDATION_LOGS_PREFIX,
                        wait_percent=validation.wait_percent,
                    )
                )

    def on_train_end(self, logs=None):
        training = self._training
        line = None if training is None else training.fit_wait.reading()
        self._shutdown()
        if line is not None and (self.params or {}).get("verbose", 1) != 0:
            print(f"GPUMonitor: {line}")  # the fit's reading, after Keras's last epoch line

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
                count = self._call_count("evaluate")
                validation = training.validation
                if count is not None and self.batch_size is None:
                    validation.count = count.snapshot
                validation.wait_on(self._waited(count, "validation", False))
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
