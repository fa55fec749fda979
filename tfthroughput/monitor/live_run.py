"""One monitored ``fit`` while it runs: its sampler, its writer and the epoch's windows.

:class:`LiveRun` is made by ``GPUMonitor.on_train_begin`` and dropped when the ``fit`` ends
(and by ``on_test_begin`` or ``on_predict_begin`` outside ``fit``, for one ``evaluate`` or
``predict`` call, measured as one epoch of batches with the call's name as ``phase``). An
epoch's validation is measured apart from its training steps (:mod:`.epoch_parts`). Threads:
the training thread (epoch hooks), Keras's callback thread (the batch hook, where callbacks
are dispatched asynchronously), the sampler thread (windows cut by time; the final write when
``fit`` is left without ``on_train_end``). One lock orders the cuts; the sampler thread takes
it only from its ``on_sample`` hook, called holding none of the sampler's locks: no deadlock.

Why the step of a time-based window comes from the batch hook: the sampler thread decides when
a window ends, but cannot read ``model.optimizer.iterations`` on every backend (under JAX, ``fit``
trains on a copy of the variables, written back into the model only at each epoch's end; on
PyTorch or TensorFlow the read would queue behind the training step). The hook stores the
completed step count (the epoch's first step, read in ``on_epoch_begin``, plus Keras's batch
index) in a plain attribute, which the sampler thread reads when it ends a window.

Why a window of ``update_freq`` steps ends at a multiple of it, not at the step of the hook
that noticed it: where Keras dispatches batch hooks to a thread pool (JAX, PyTorch) they run out
of order, so the first hook to see the window full may be a later step's.

Why a fit can leave steps unwritten: a fit resumed by ``keras.callbacks.BackupAndRestore``
restarts from the backup's optimizer step, below steps the interrupted fit already wrote. Those
windows, measured again, are not written twice (their samples go into the next window), and the
epoch the interruption cut short was written as a window where it stopped, not as an epoch.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence

from tfthroughput.hardware.sampler import Sampler
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.cluster_exchange import ClusterExchange
from tfthroughput.monitor.epoch_parts import EpochParts, OpenValidation, PhasePart
from tfthroughput.monitor.epoch_windows import EpochWindows, UpdateFrequency, Window
from tfthroughput.monitor.event_writer import EventWriter
from tfthroughput.monitor.events import overstated_utilization_warning
from tfthroughput.monitor.example_count import Snapshot, StepExamples
from tfthroughput.monitor.input_reading import FitWait
from tfthroughput.monitor.input_wait import PhaseWait
from tfthroughput.monitor.measurements import epoch_measurement, window_measurement
from tfthroughput.monitor.run_layout import RunLayout
from tfthroughput.sinks.fan_out import SinkFanOut

# Windows kept for readers such as DipTrigger (GPUMonitor.windows_since).
RECENT_WINDOWS = 1000


class LiveRun:
    """Everything live during one ``fit``.

    Args:
        writer: The run's event writer (also the first of ``sinks``), for the layout.
        sinks: Where each window's and each epoch's figures go, TensorBoard first.
        update: When windows end.
        statistics: The statistics to log.
        batch_size: Examples per step, or None.
        count: Reads the count of the examples trained, if one is kept (exact: it overrides).
        waited: Reads the seconds the loop has waited for its batches so far, where that is
            measured (:mod:`tfthroughput.monitor.input_wait`).
        clock: Monotonic seconds.
        select: Keeps the statistics of the metrics the monitor was asked for.
        phase: ``None`` for a ``fit``; ``"evaluate"`` or ``"predict"`` for such a call, whose
            tags it prefixes (``evaluate/seconds``, ``evaluate/window/...``).
    """

    def __init__(
        self,
        writer: EventWriter,
        sinks: SinkFanOut,
        *,
        update: UpdateFrequency,
        statistics: Sequence[str],
        batch_size: int | None,
        clock: Callable[[], float],
        count: Callable[[], Snapshot] | None = None,
        waited: Callable[[], float | None] | None = None,
        select: Callable[[WindowStats], WindowStats],
        phase: str | None = None,
    ) -> None:
        self.writer, self.sinks, self.phase = writer, sinks, phase
        self.sampler: Sampler  # set by the monitor right after, as it calls back into this
        self.update = update
        self._statistics = statistics
        self.batch_size = batch_size  # global: examples per step across every replica
        self.examples = StepExamples(count, batch_size)  # examples per step, as counted
        self.wait = PhaseWait(waited)  # the share of each phase and window waiting for input
        self.fit_wait = FitWait()  # the same over the whole fit, for its last line
        self.cluster: ClusterExchange | None = None  # under MultiWorkerMirroredStrategy
        self._clock = clock
        self._select = select
        self._lock = threading.Lock()
        self.windows: EpochWindows | None = None  # the epoch in progress, if any
        self.last_step = 0  # optimizer steps completed, as the batch hook last saw
        self.recent: tuple[Window, ...] = ()  # replaced whole, so readers need no lock
        self.window_count = 0
        self.layout = RunLayout(
            writer,
            statistics=statistics,
            examples=batch_size is not None or count is not None,
            windows=not update.per_epoch,
            phase=phase,
            wait=waited is not None,
        )
        self._last_batch: int | None = None
        self.finished = False
        self.warned_overstated_utilization = False
        # Windows at or below this step were written by an earlier fit of the monitor that a
        # resumed fit rolled back (see the module docstring): not written again.
        self.written_through: int | None = None
        self._first_epoch = True
        # The epoch's training part once its validation has begun, with the epoch's start and
        # its wait share.
        self._training_part: tuple[int, WindowStats, float, float, float | None] | None = None
        self.validation: OpenValidation | None = None

    def begin_epoch(self, epoch: int, first_step: int | None, steps: int | None = None) -> None:
        """Start an epoch.

        Args:
            epoch: The epoch.
            first_step: The optimizer's step count, if it could be read.
            steps: Keras's batches in the epoch, if known.
        """
        # The epoch's last batch leaves its window to the epoch's end, which ends it anyway.
        self._last_batch = steps - 1 if steps else None
        if self._first_epoch and epoch == 0:
            self.written_through = None  # a fit from the start, not a resumed one
        self._first_epoch = False
        with self._lock:
            # The clock is read before the sampler's window is cut, so the epoch's span holds
            # everything its window does (energy included): never a joule more than its time.
            start = self._clock()
            self.sampler.collect()  # drop samples taken between epochs
            if first_step is not None:
                self.last_step = first_step
            self.windows = EpochWindows(epoch, start, self.last_step, self.window_count, self.wait)
            self.examples.begin_epoch(self.last_step)
            self.wait.begin()

    def batch_end(self, batch: int) -> None:
        """After Keras's batch ``batch`` of the epoch: note the step, end a window if due."""
        windows = self.windows
        if windows is None:
            return
        if self._last_batch is not None and batch > self._last_batch:
            batch = self._last_batch  # Keras names a cut execution's end step all the same
        step = windows.first_step + batch + 1
        if step > self.last_step:  # hooks on Keras's callback thread may arrive out of order
            self.last_step = step
        if self.update.batches is not None and batch != self._last_batch:
            if self._window_end(windows, step) is not None:
                self._cut(step, sample_now=True)

    def sampled(self) -> None:
        """The sampler thread's hook after each sample: end the window if its time is up."""
        windows = self.windows
        seconds = self.update.seconds
        if windows is not None and seconds is not None:
            if self._clock() - windows.window_start >= seconds:
                self._cut(self.last_step, sample_now=False)

    def begin_validation(self, step: int | None, batch_size: int | None) -> bool:
        """End the training part of the epoch in progress, and begin its validation.

        Args:
            step: The optimizer's step count now, if it could be read.
            batch_size: Examples per validation batch, if known.

        Returns:
            Whether an epoch was in progress (else nothing changed: an ``evaluate`` outside
            an epoch is not this run's validation).
        """
        with self._lock:
            windows, self.windows = self.windows, None  # no window is cut while validating
            if windows is None:
                return False
            stats = self._select(self.sampler.collect(sample_now=True))
            now = self._clock()
            self.last_step = max(self.last_step, windows.first_step if step is None else step)
            self._publish(windows.cut(stats, now, self.last_step))
            self._training_part = (
                windows.epoch,
                windows.epoch_stats(),
                now - windows.start,
                windows.start,
                self.wait.phase(now - windows.start),
            )
            self.validation = OpenValidation(now, batch_size)
        return True

    def end_validation(self) -> None:
        """End the validation in progress, if any."""
        with self._lock:
            validation = self.validation
            if validation is None or validation.ended is not None:
                return
            stats = self._select(self.sampler.collect(sample_now=True))
            validation.end(stats, self._clock())

    def end_epoch(self, epoch: int, steps: int | None) -> EpochParts:
        """End the epoch in progress, all of it: cut its last window, write its phases'
        statistics and figures, warn (once per fit) where GPU-Util overstates the work, and
        hand the epoch to the cluster exchange; ``steps`` is how many optimizer steps it took
        (batches, for a call of ``evaluate`` or ``predict``), if known.

        Returns:
            The epoch phase by phase: the training part's seconds and statistics run to the
            validation's start, when it validated. A part never begun (hooks driven by hand
            without ``on_epoch_begin``) has no seconds.
        """
        parts = self._end_parts(epoch, steps)
        self.write_epoch(epoch, parts)
        self.fit_wait.write_reading(self.writer, epoch, parts.training, self.phase)
        if self.phase is None:
            self._warn_if_utilization_overstates(parts.training.stats, epoch)
            if self.cluster is not None:  # every worker, every epoch: the others wait for it
                seconds = parts.training.figures().get("seconds")
                self.cluster.epoch_end(epoch, parts.training.stats, seconds)
        return parts

    def _end_parts(self, epoch: int, steps: int | None) -> EpochParts:
        self.end_validation()  # in case Keras's on_test_end did not come
        with self._lock:
            windows, self.windows = self.windows, None
            part, self._training_part = self._training_part, None
            validation, self.validation = self.validation, None
            collected = self.sampler.collect(sample_now=part is None)
            now = self._clock()
            if part is not None:  # validated: after validation, no phase but the epoch's own
                _, stats, seconds, start, wait = part
                self.layout.show(stats, force=True, validation=True)
                return EpochParts(
                    PhasePart(stats, seconds, steps, self.examples.epoch(steps), wait),
                    validation.ended if validation is not None else None,
                    now - start,
                )
            begun = windows is not None
            if windows is None:
                windows = EpochWindows(epoch, now, self.last_step, self.window_count, self.wait)
            step = max(self.last_step, windows.first_step + (steps or 0))
            self.last_step = step
            self._publish(windows.cut(self._select(collected), now, step))
            epoch_stats = windows.epoch_stats()
            self.layout.show(epoch_stats, force=True)
            batch_size = self.examples.epoch(steps)  # after the epoch's last window
            seconds = now - windows.start if begun else None
            wait = self.wait.phase(seconds)
        return EpochParts(PhasePart(epoch_stats, seconds, steps, batch_size, wait), None, seconds)

    def write_epoch(self, epoch: int, parts: EpochParts) -> None:
        """Write an epoch's phases as one event at ``step=epoch``."""
        self.sinks.write(
            epoch_measurement(
                epoch,
                parts,
                step=self.last_step,
                statistics=self._statistics,
                batch_size=parts.training.batch_size or self.batch_size,
                phase=self.phase,
            )
        )

    def finish(self) -> None:
        """Write the epoch cut short, if any, and close the writer; once per ``fit``."""
        if self.finished:
            return
        self.finished = True
        with self._lock:
            windows, self.windows = self.windows, None
            if windows is not None:  # fit ended inside an epoch: keep what was sampled
                stats = self._select(self.sampler.collect())
                window = windows.cut(stats, self._clock(), self.last_step)
                if self.phase is None and self.last_step > windows.first_step:
                    # A fit cut short: a window where it stopped, not an epoch point that a
                    # resumed fit would write again.
                    self._publish(window, always=True)
                else:  # a call, or no step known (hooks driven by hand): as far as it got
                    self._publish(window)
                    self._write_cut_short(windows.epoch, windows.epoch_stats(), None)
            elif self._training_part is not None:  # ended while validating
                epoch, training_stats, _, _, _ = self._training_part
                stats = self._select(self.sampler.collect())
                self._write_cut_short(epoch, training_stats, stats)
        self.sinks.close()  # the event writer with them
        if self.cluster is not None:
            self.cluster.close()

    def _warn_if_utilization_overstates(self, stats: WindowStats, epoch: int) -> None:
        """Once per fit: GPU-Util far above SM activity means tiny kernels, not real work."""
        if self.warned_overstated_utilization:
            return
        message = overstated_utilization_warning(stats, epoch)
        if message is not None:
            self.warned_overstated_utilization = True
            warnings.warn(message, MonitoringWarning, stacklevel=4)

    def windows_since(self, index: int) -> tuple[Window, ...]:
        return tuple(window for window in self.recent if window.index >= index)

    # Internals -----------------------------------------------------------------------------

    def _write_cut_short(
        self, epoch: int, stats: WindowStats, validation: WindowStats | None
    ) -> None:
        """An epoch (or call) cut short: its statistics, without figures."""
        part = PhasePart(stats, None, None, None)
        validated = None if validation is None else PhasePart(validation, None, None, None)
        self.write_epoch(epoch, EpochParts(part, validated, None))

    def _cut(self, step: int, *, sample_now: bool) -> None:
        """End the open window if it is due after ``step`` steps (still, under the lock)."""
        with self._lock:
            windows = self.windows
            end = None if windows is None else self._window_end(windows, step)
            if end is None:
                return  # the epoch ended meanwhile, or another thread cut this window
            stats = self._select(self.sampler.collect(sample_now=sample_now))
            self._publish(windows.cut(stats, self._clock(), end))

    def _window_end(self, windows: EpochWindows, step: int) -> int | None:
        """The step the open window ends at after ``step`` steps (see ``EpochWindows.end``)."""
        return windows.end(step, self.update, self._clock(), self.written_through)

    def _publish(self, window: Window | None, *, always: bool = False) -> None:
        """Make a window visible: to readers always, in TensorBoard when windows are asked for
        (or ``always``), unless a fit before a resume wrote its step already."""
        if window is None:
            return
        batch_size = self.examples.window(window.step, window.steps)  # always: it moves on
        if batch_size == 0.0:
            return  # steps Keras named past the data's end: no batch, nothing to show
        self.recent = (*self.recent[-(RECENT_WINDOWS - 1) :], window.without_samples())
        self.window_count = window.index + 1
        if self.update.per_epoch and not always:
            return  # the epoch's own tags say it all
        if self.written_through is not None and window.step <= self.written_through:
            return  # rolled back by a resume and measured again: its samples are in the epoch
        self.written_through = window.step
        self.sinks.write(
            window_measurement(
                window, statistics=self._statistics, batch_size=batch_size, phase=self.phase
            )
        )
        self.layout.show(window.stats)
