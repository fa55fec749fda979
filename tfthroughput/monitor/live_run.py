"""One monitored ``fit`` while it runs: its sampler, its writer and the epoch's windows.

:class:`LiveRun` is made by ``GPUMonitor.on_train_begin`` and dropped when the ``fit`` ends. It
is reached from several threads: the training thread (epoch hooks), Keras's callback thread
(the batch hook, on backends that dispatch callbacks asynchronously), and the sampler thread
(windows cut by time, and the final write when ``fit`` is left without ``on_train_end``). One
lock orders the cuts; the sampler thread takes it only from its ``on_sample`` hook, which the
sampler calls holding none of its own locks, so the two cannot wait on each other.

Why the step of a time-based window comes from the batch hook: the sampler thread decides when
a window ends, but it cannot read ``model.optimizer.iterations`` on every backend. Under JAX,
``fit`` trains on a copy of the variables and writes them back into the model only at the end
of each epoch, so mid-epoch the variable still holds the epoch's first step; reading a device
variable from another thread would also queue behind the training step on PyTorch or
TensorFlow. The hook instead stores the completed step count (the epoch's first step, read
once in ``on_epoch_begin``, plus Keras's batch index) in a plain attribute, which the sampler
thread reads when it ends a window.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Mapping, Sequence

from tfthroughput.hardware.sampler import SampleKey, Sampler
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.cluster_exchange import ClusterExchange
from tfthroughput.monitor.dashboard import hardware_layout
from tfthroughput.monitor.epoch_windows import EpochWindows, UpdateFrequency, Window
from tfthroughput.monitor.events import (
    EventWriter,
    energy_joules,
    epoch_figures,
    hardware_scalars,
    overstated_utilization_warning,
    window_scalars,
)

# Windows kept for readers such as DipTrigger (GPUMonitor.windows_since).
RECENT_WINDOWS = 1000


class LiveRun:
    """Everything live during one ``fit``.

    Args:
        writer: The run's event writer.
        update: When windows end.
        statistics: The statistics to log.
        batch_size: Examples per step, or None.
        clock: Monotonic seconds.
        select: Keeps the statistics of the metrics the monitor was asked for.
    """

    def __init__(
        self,
        writer: EventWriter,
        *,
        update: UpdateFrequency,
        statistics: Sequence[str],
        batch_size: int | None,
        clock: Callable[[], float],
        select: Callable[[WindowStats], WindowStats],
    ) -> None:
        self.writer = writer
        self.sampler: Sampler  # set by the monitor right after, as it calls back into this
        self.update = update
        self.watches_steps = not update.per_epoch  # whether the batch hook has work to do
        self._statistics = statistics
        self.batch_size = batch_size  # global: examples per step across every replica
        self.cluster: ClusterExchange | None = None  # under MultiWorkerMirroredStrategy
        self._clock = clock
        self._select = select
        self._lock = threading.Lock()
        self.windows: EpochWindows | None = None  # the epoch in progress, if any
        self.last_step = 0  # optimizer steps completed, as the batch hook last saw
        self.recent: tuple[Window, ...] = ()  # replaced whole, so readers need no lock
        self.window_count = 0
        self._layout_keys: frozenset[SampleKey] | None = None  # what the written layout shows
        self._layout_totals: frozenset[SampleKey] = frozenset()
        self._last_batch: int | None = None
        self.finished = False
        self.warned_overstated_utilization = False

    def begin_epoch(self, epoch: int, first_step: int | None, steps: int | None = None) -> None:
        """Start an epoch.

        Args:
            epoch: The epoch.
            first_step: The optimizer's step count, if it could be read.
            steps: Keras's batches in the epoch, if known.
        """
        # The epoch's last batch leaves its window to the epoch's end, which ends it anyway.
        self._last_batch = steps - 1 if steps else None
        with self._lock:
            # The clock is read before the sampler's window is cut, so the epoch's span holds
            # everything its window does (energy included): never a joule more than its time.
            start = self._clock()
            self.sampler.collect()  # drop samples taken between epochs
            if first_step is not None:
                self.last_step = first_step
            self.windows = EpochWindows(epoch, start, self.last_step, self.window_count)

    def batch_end(self, batch: int) -> None:
        """After Keras's batch ``batch`` of the epoch: note the step, end a window if due."""
        windows = self.windows
        if windows is None:
            return
        step = windows.first_step + batch + 1
        if step > self.last_step:  # hooks on Keras's callback thread may arrive out of order
            self.last_step = step
        every = self.update.batches
        if every is not None and step - windows.window_first_step >= every:
            if batch != self._last_batch:
                # At this hook's own step: hooks on Keras's callback thread may run out of
                # order, and a later step's may already have been seen.
                self._cut(step, sample_now=True)

    def sampled(self) -> None:
        """The sampler thread's hook after each sample: end the window if its time is up."""
        windows = self.windows
        seconds = self.update.seconds
        if windows is not None and seconds is not None:
            if self._clock() - windows.window_start >= seconds:
                self._cut(self.last_step, sample_now=False)

    def end_epoch(self, epoch: int, steps: int | None) -> tuple[WindowStats, dict[str, float]]:
        """End the epoch in progress, all of it: cut its last window, write its statistics and
        figures, warn (once per fit) where GPU-Util overstates the work, and hand the epoch to
        the cluster exchange; ``steps`` is how many it took, if known.

        Returns:
            The statistics of all its samples, and its figures (seconds, steps/s, examples/s,
            energy; only those known: no seconds if it was never begun, as with hooks driven by
            hand without ``on_epoch_begin``).
        """
        with self._lock:
            windows, self.windows = self.windows, None
            stats = self._select(self.sampler.collect(sample_now=True))
            now = self._clock()
            begun = windows is not None
            if windows is None:
                windows = EpochWindows(epoch, now, self.last_step, self.window_count)
            step = max(self.last_step, windows.first_step + (steps or 0))
            self.last_step = step
            self._publish(windows.cut(stats, now, step))
            epoch_stats = windows.epoch_stats()
            self._show_in_layout(epoch_stats, force=True)
        seconds = now - windows.start if begun else None
        figures = epoch_figures(seconds, steps, self.batch_size, joules=energy_joules(epoch_stats))
        self.write_epoch(epoch, epoch_stats, figures)
        self._warn_if_utilization_overstates(epoch_stats, epoch)
        if self.cluster is not None:  # every worker, every epoch: the others wait for it
            self.cluster.epoch_end(epoch, epoch_stats, figures.get("seconds"))
        return epoch_stats, figures

    def write_epoch(self, epoch: int, stats: WindowStats, figures: Mapping[str, float]) -> None:
        self.writer.write(epoch, hardware_scalars(stats, self._statistics, figures))

    def finish(self) -> None:
        """Write the epoch cut short, if any, and close the writer; once per ``fit``."""
        if self.finished:
            return
        self.finished = True
        with self._lock:
            windows, self.windows = self.windows, None
            if windows is not None:  # fit ended inside an epoch: keep what was sampled
                stats = self._select(self.sampler.collect())
                self._publish(windows.cut(stats, self._clock(), self.last_step))
                self.write_epoch(windows.epoch, windows.epoch_stats(), {})
        self.writer.close()
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

    def _cut(self, step: int, *, sample_now: bool) -> None:
        """End the open window after ``step`` steps, if it is still due."""
        with self._lock:
            windows = self.windows
            if windows is None or not self._due(windows, step):
                return  # the epoch ended meanwhile, or another thread cut this window
            stats = self._select(self.sampler.collect(sample_now=sample_now))
            self._publish(windows.cut(stats, self._clock(), step))

    def _due(self, windows: EpochWindows, step: int) -> bool:
        steps = step - windows.window_first_step
        if self.update.batches is not None:
            return steps >= self.update.batches
        return steps > 0 and self._clock() - windows.window_start >= self.update.seconds

    def _publish(self, window: Window | None) -> None:
        """Make a window visible: to readers always, in TensorBoard when windows are asked for."""
        if window is None:
            return
        self.recent = (*self.recent[-(RECENT_WINDOWS - 1) :], window.without_samples())
        self.window_count = window.index + 1
        if self.update.per_epoch:
            return  # the epoch's own tags say it all
        figures = epoch_figures(
            window.seconds, window.steps, self.batch_size, joules=energy_joules(window.stats)
        )
        scalars = window_scalars(window.stats, self._statistics, figures)
        self.writer.write(window.step, scalars, what="the window at step")
        self._show_in_layout(window.stats)

    def _show_in_layout(self, stats: WindowStats, force: bool = False) -> None:
        """Write the Custom Scalars layout when the run shows a source or metric not in it."""
        written = self._layout_keys
        keys = (written or frozenset()) | frozenset(stats) | frozenset(stats.totals)
        self._layout_totals |= frozenset(stats.totals)
        if keys == written:
            return
        if written is None and not keys and not force:
            return  # a window without samples says nothing yet; an epoch's end writes anyway
        self._layout_keys = keys
        layout = hardware_layout(
            keys,
            totals=self._layout_totals,
            statistics=self._statistics,
            examples=self.batch_size is not None,
            windows=not self.update.per_epoch,
        )
        self.writer.write_layout(layout)
