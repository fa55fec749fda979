"""``ProfileSteps``: a profiler trace of chosen training steps, with the step markers xprof needs.

Keras 3 no longer wraps its training steps in the profiler's step markers (a root ``TraceMe``
named ``train`` with ``step_num``), so a trace taken with ``keras.callbacks.TensorBoard(
profile_batch=...)`` leaves TensorBoard's Profile tab without a step time: the overview says
"No step marker observed" and the input-pipeline analyzer cannot attribute anything to input.
This callback captures the steps it is given and marks each one as tf.keras 2 did; given a
:class:`~tfthroughput.profiling.DipTrigger`, it also captures steps when the GPU starves.
"""

from __future__ import annotations

import glob
import importlib.util
import numbers
import os
import warnings
from dataclasses import dataclass

import keras

from tfthroughput._optional import import_tensorflow
from tfthroughput._validation import check_folder_name, check_writable_folder
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.monitor.text_entries import write_text
from tfthroughput.profiling.dip_trigger import DipTrigger

# Text tag of the entry written after each capture on a dip, in the run that holds the trace.
CAPTURE_TAG = "profile/capture"
DEFAULT_STEPS = (10, 20)

# It traces with TensorFlow's profiler, so unlike GPUMonitor it needs TensorFlow.
tf = import_tensorflow("tfthroughput.ProfileSteps")

# Since tensorboard-plugin-profile 2.20 the TensorBoard plugin lives in `xprof` (the old name is
# a pass-through); older releases ship it in `tensorboard_plugin_profile` itself.
PROFILE_PLUGIN_MODULES = ("xprof", "tensorboard_plugin_profile")


@dataclass(frozen=True)
class _Capture:
    start: int
    stop: int
    reason: str | None  # why a dip capture was taken; None for the `step_range` window


def profile_plugin_available() -> bool:
    """Whether TensorBoard's Profile tab (``tensorboard-plugin-profile``) is installed."""
    return any(importlib.util.find_spec(name) is not None for name in PROFILE_PLUGIN_MODULES)


class ProfileSteps(keras.callbacks.Callback):
    """Captures a profiler trace of training steps ``start`` to ``stop`` for TensorBoard.

    Steps are the model's optimizer steps, counted from 1 (step ``n`` is the one taken when
    ``model.optimizer.iterations`` is ``n - 1``), so they continue across ``fit`` calls and a
    resumed run. The trace goes to ``<log_dir>/<run_name>/plugins/profile/<time>/``, where
    TensorBoard's Profile tab finds it; with the default ``run_name`` that is where
    ``keras.callbacks.TensorBoard(log_dir)`` puts its own traces. Each step is wrapped in the
    profiler's step marker (``tf.profiler.experimental.Trace("train", step_num=n, _r=1)``), so
    the overview page, the step-time graph and the input-pipeline analyzer show real numbers.

    Only ``on_train_batch_begin`` is overridden (Keras keeps dispatching steps asynchronously):
    outside the window it compares two integers (and reads the step count once per epoch until
    the window has passed). Inside, it waits for the previous step to finish on every device
    (``tf.test.experimental.sync_devices()``) before closing that step's marker, so each marker
    covers its step's work; the profiler itself slows the traced steps too, so trace a few. A
    marker ends at the next step's start, at validation or at the end of the epoch. With
    ``steps_per_execution=k`` a marker covers one execution of ``k`` steps.

    xprof's step analysis leaves out the first and the last captured step when more than five
    are captured (it cannot tell that they are complete), so capture one more on each side if
    every step of a window matters.

    **On a dip**: with ``on_dip=DipTrigger(monitor, ...)``, it also captures the trigger's
    ``steps`` steps from the next step on each time the trigger fires (a run of low windows in
    the monitor, at most once per cooldown, never in the warm-up epochs), and then writes a
    text entry ``profile/capture`` into the same run saying which steps were captured, into
    which trace folder, and why. It polls the trigger before each step: one integer compared
    until a window ends.

    Profiling faults never stop training: a profiler that cannot start (another one is
    running) or save is reported as a ``MonitoringWarning``. If ``fit`` raises inside the
    window (Keras then calls no callback hook), the trace is saved when this callback's next
    ``fit`` begins.

    Args:
        log_dir: TensorBoard log directory. Defaults to ``"logs"``.
        step_range: ``(start, stop)``: the first and last step to capture, ``0 < start <= stop``.
            Defaults to ``(10, 20)``, after the first steps' tracing and warm-up; with
            ``on_dip``, to no fixed window.
        run_name: Sub-directory of ``log_dir`` (the TensorBoard run) that holds the trace.
            Defaults to ``"train"``.
        on_dip: A :class:`~tfthroughput.DipTrigger`: also capture when it fires. Defaults to
            None.

    Raises:
        ImportError: If TensorFlow is not installed (importing this module raises it), or
            ``tensorboard-plugin-profile`` is not (without it TensorBoard has no Profile tab to
            show the trace).
        ValueError: If Keras runs on another backend than TensorFlow, whose steps TensorFlow's
            profiler would not see.
        TypeError, ValueError: For invalid arguments, naming the argument and value.

    Example:
        >>> profile = ProfileSteps("logs/run1", step_range=(10, 14))
        >>> model.fit(dataset, epochs=2, callbacks=[profile])  # doctest: +SKIP
        >>> # tensorboard --logdir logs/run1, then the Profile tab
        >>> monitor = GPUMonitor("logs/run1", update_freq="30s")  # doctest: +SKIP
        >>> on_dip = ProfileSteps("logs/run1", on_dip=DipTrigger(monitor))  # doctest: +SKIP
    """

    def __init__(
        self,
        log_dir: str | os.PathLike = "logs",
        step_range: tuple[int, int] | None = None,
        *,
        run_name: str = "train",
        on_dip: DipTrigger | None = None,
    ) -> None:
        super().__init__()
        if not profile_plugin_available():
            raise ImportError(
                "ProfileSteps writes traces for TensorBoard's Profile tab, which needs "
                "tensorboard-plugin-profile: pip install tensorboard-plugin-profile"
            )
        if keras.config.backend() != "tensorflow":
            raise ValueError(
                "ProfileSteps traces with TensorFlow's profiler, which sees only Keras's "
                "TensorFlow backend: set KERAS_BACKEND=tensorflow, or use your backend's own "
                "profiler (jax.profiler, torch.profiler). GPUMonitor works on every backend. "
                f"Received: keras.config.backend()={keras.config.backend()!r}"
            )
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"`log_dir` must be a path. Received: log_dir={log_dir!r}")
        if on_dip is not None and not isinstance(on_dip, DipTrigger):
            raise TypeError(f"`on_dip` must be a DipTrigger or None. Received: on_dip={on_dip!r}")
        if step_range is None:
            step_range = None if on_dip is not None else DEFAULT_STEPS
        self.step_range = None if step_range is None else _validate_step_range(step_range)
        self.on_dip = on_dip
        check_folder_name("run_name", run_name)
        self.log_dir = os.fspath(log_dir)
        self.run_name = run_name
        self._reset()
        self._ever_captured = False

    @property
    def run_dir(self) -> str:
        """The TensorBoard run that holds the traces: ``<log_dir>/<run_name>``."""
        return os.path.join(self.log_dir, self.run_name)

    @property
    def traced_steps(self) -> tuple[int, ...]:
        """The steps whose markers the last ``fit`` wrote (first step of each execution)."""
        return tuple(self._traced)

    # Keras hooks ---------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self._stop_profiler()  # a fit that raised inside the window left the profiler running
        self._reset()
        first = self._optimizer_step() + 1
        self._first_step = self._epoch_first_step = first
        self._fixed_done = self.step_range is None or first > self.step_range[1]
        if self.on_dip is not None:
            self.on_dip.begin_fit()
        if not self._idle():
            check_writable_folder("log_dir", self.run_dir)

    def on_epoch_begin(self, epoch, logs=None):
        if self.on_dip is not None:
            self.on_dip.begin_epoch(epoch)
        if not self._idle():
            self._epoch_first_step = self._optimizer_step() + 1

    def on_train_batch_begin(self, batch, logs=None):
        if self._idle():
            return
        step = self._epoch_first_step + batch
        if self._profiling:
            step = self._end_step_marker()
        else:
            capture = self._next_capture(step)
            if capture is None or not self._start_profiler(capture):
                return
        if step > self._capture.stop:
            self._stop_profiler()
            return
        self._marker = tf.profiler.experimental.Trace("train", step_num=step, _r=1)
        self._marker.__enter__()
        self._traced.append(step)

    def on_test_begin(self, logs=None):
        self._end_step_marker()  # validation is not part of the training step

    def on_epoch_end(self, epoch, logs=None):
        self._end_step_marker()

    def on_train_end(self, logs=None):
        self._stop_profiler()
        if self.step_range is not None and not self._ever_captured and not self._warned:
            last = self._optimizer_step()
            warnings.warn(
                f"ProfileSteps captured no trace: this fit ran steps {self._first_step} to "
                f"{last} and the window is steps {self.step_range[0]} to {self.step_range[1]} "
                "(steps count the model's optimizer steps from 1).",
                MonitoringWarning,
                stacklevel=2,
            )

    # Internals -----------------------------------------------------------------------------

    def _reset(self) -> None:
        self._profiling = False
        self._fixed_done = False
        self._capture: _Capture | None = None
        self._marker = None
        self._warned = False
        self._traced: list[int] = []
        self._first_step = self._epoch_first_step = 1

    def _idle(self) -> bool:
        """Nothing left to capture in this fit: the `step_range` window is past and no trigger."""
        return self._fixed_done and self.on_dip is None

    def _next_capture(self, step: int) -> _Capture | None:
        if not self._fixed_done and step + self._steps_per_execution() - 1 >= self.step_range[0]:
            return _Capture(self.step_range[0], self.step_range[1], None)
        if self.on_dip is not None:
            reason = self.on_dip.poll()
            if reason is not None:
                return _Capture(step, step + self.on_dip.steps - 1, reason)
        return None

    def _optimizer_step(self) -> int:
        """Optimizer steps taken so far (reading it waits for the last dispatched step)."""
        return int(self.model.optimizer.iterations.numpy())

    def _steps_per_execution(self) -> int:
        return int(getattr(self.model, "steps_per_execution", 1) or 1)

    def _start_profiler(self, capture: _Capture) -> bool:
        try:
            tf.profiler.experimental.start(self.run_dir)
        except Exception as error:  # noqa: BLE001 - profiling must not stop training
            self._warned = True
            self._fixed_done = self._fixed_done or capture.reason is None
            warnings.warn(
                f"ProfileSteps could not start the profiler ({error}); steps {capture.start} "
                f"to {capture.stop} are not traced. Is another profiler running (e.g. "
                "keras.callbacks.TensorBoard with profile_batch)?",
                MonitoringWarning,
                stacklevel=3,
            )
            return False
        self._profiling = True
        self._capture = capture
        self._capture_first_marker = len(self._traced)
        return True

    def _end_step_marker(self) -> int:
        """Close the open step marker once its step has run; returns the next step's number."""
        if self._marker is None:
            return self._optimizer_step() + 1 if self._profiling else 0
        tf.test.experimental.sync_devices()  # the marked step's GPU work is done too
        next_step = self._optimizer_step() + 1
        marker, self._marker = self._marker, None
        marker.__exit__(None, None, None)
        return next_step

    def _stop_profiler(self) -> None:
        if not self._profiling:
            return
        self._end_step_marker()
        self._profiling = False
        capture, self._capture = self._capture, None
        self._fixed_done = self._fixed_done or capture.reason is None
        try:
            tf.profiler.experimental.stop()
        except Exception as error:  # noqa: BLE001 - profiling must not stop training
            self._warned = True
            warnings.warn(
                f"ProfileSteps could not save its trace to {self.run_dir!r}: {error}",
                MonitoringWarning,
                stacklevel=3,
            )
            return
        traced = self._traced[self._capture_first_marker :]
        if capture.reason is None:
            self._ever_captured = self._ever_captured or bool(traced)
        elif traced:
            last = traced[-1] + self._steps_per_execution() - 1
            self._write_capture_note(traced[0], last, capture.reason)

    def _write_capture_note(self, first: int, last: int, reason: str) -> None:
        """The text entry saying which steps a dip capture holds and why."""
        traces = sorted(glob.glob(os.path.join(self.run_dir, "plugins", "profile", "*")))
        session = f"{self.run_name}/{os.path.basename(traces[-1])}" if traces else ""
        where = f" (the Profile tab's session `{session}`)" if traces else ""
        text = f"Captured steps {first} to {last}{where}: {reason}."
        try:
            write_text(self.run_dir, {CAPTURE_TAG: text}, step=first)
        except Exception as error:  # noqa: BLE001 - profiling must not stop training
            warnings.warn(
                f"ProfileSteps could not write its capture note to {self.run_dir!r}: {error!r}",
                MonitoringWarning,
                stacklevel=3,
            )


def _validate_step_range(step_range: object) -> tuple[int, int]:
    if (
        not isinstance(step_range, (tuple, list))
        or len(step_range) != 2
        or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in step_range)
    ):
        raise TypeError(
            "`step_range` must be a pair of ints (start, stop): the first and last training step "
            f"to profile, e.g. step_range=(10, 20). Received: step_range={step_range!r}"
        )
    start, stop = int(step_range[0]), int(step_range[1])
    if not 0 < start <= stop:
        raise ValueError(
            "`step_range` must be (start, stop) with 0 < start <= stop (steps count from 1; "
            f"step_range=(n, n) profiles one step). Received: step_range={step_range!r}"
        )
    return start, stop
