"""The live side of :class:`~tfthroughput.monitor.GPUMonitor`: starting its runs, ending them
(by its end hooks, by ``close``, or on the sampler thread once the watched call was left
without them), and copying it unstarted.

:class:`MonitorLifecycle` is ``GPUMonitor``'s base class; ``GPUMonitor`` holds the settings,
the Keras hooks and the public methods, this the internals they share. Nothing here exists
before a run starts (a callback is a value Keras may copy): the live state is ``_training``
(the ``fit`` in progress, a :class:`~tfthroughput.monitor.live_run.LiveRun`) and ``_calls``
(``evaluate`` and ``predict`` outside ``fit``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import keras

from tfthroughput.hardware.discovery import default_sources
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.event_files import create_new_file, open_for_appending
from tfthroughput.monitor.example_count import ExampleCount, attach_to_fit
from tfthroughput.monitor.execution_check import warn_partial_execution
from tfthroughput.monitor.fit_watch import find_fit, fit_locals
from tfthroughput.monitor.inference_calls import InferenceCalls
from tfthroughput.monitor.input_activity import SOURCE_NAME as INPUT_ACTIVITY_SOURCE
from tfthroughput.monitor.input_wait import waited_reader
from tfthroughput.monitor.live_run import LiveRun
from tfthroughput.monitor.run_start import RunSettings, start_run
from tfthroughput.monitor.steps import optimizer_steps, trained_steps
from tfthroughput.monitor.strategy import (
    call_batch_size,
    find_placement,
    fit_batch_size,
    global_batch_size,
)

_NO_FIT_WARNING = (
    "GPUMonitor found no Keras `fit` calling it (a hand-written training loop?), so it cannot "
    "tell if training stops without `on_train_end`: use it as `with monitor:` or call "
    "`monitor.close()` when done."
)


def _unstarted_state() -> dict[str, object]:
    """The attributes a monitor holds while no run is live, by name."""
    return {
        "_training": None,
        "_calls": InferenceCalls(),
        "_entered": False,
        "_model": None,
        "params": None,
        "_iterations_at_epoch_start": None,
        "_last_batch": None,  # of the epoch in progress
        "_example_count": None,  # counts the examples of the batches the fit trains
        "_worker_folder": None,
        "_written_through": None,
        # The steps this monitor counted itself, once `model.optimizer` is seen not to step
        # (a GAN whose `train_step` steps optimizers of its own): the step axis from then on.
        "_own_steps": None,
    }


class MonitorLifecycle(keras.callbacks.Callback):
    """The runs of one monitor: started by its begin hooks, ended by its end hooks or
    abandoned on the sampler thread. ``GPUMonitor.__init__`` sets the settings it reads."""

    # Create each event file, and open one to append to; seams where tests inject file-system
    # faults (in a subclass).
    _create_event_file = staticmethod(create_new_file)
    _append_event_file = staticmethod(open_for_appending)

    def _reset_live_state(self) -> None:
        for name, value in _unstarted_state().items():
            if name not in ("_model", "params"):  # Keras's own, set by Callback.__init__
                setattr(self, name, value)

    def _start_training(self) -> None:
        """``on_train_begin``: end a run left open, then start the ``fit``'s run."""
        self._shutdown()  # a previous run driven by hand may still be open
        placement = find_placement(self.model)
        self._worker_folder = placement.worker_name
        fit_call = find_fit()
        if fit_call is None and not self._entered:
            warnings.warn(_NO_FIT_WARNING, MonitoringWarning, stacklevel=3)
        batch_size = self._input_batch_size(fit_call, placement.multi_worker)  # count too
        count = self._example_count
        training = start_run(
            self._run_settings(),
            self.run_dir,
            fit_call,
            batch_size=batch_size,
            count=None if count is None or self.batch_size is not None else count.snapshot,
            waited=self._waited(count, "fit", placement.multi_worker),
            on_abandoned=self._abandon,
            on_sample=self._window_tick,
            placement=placement,
            sinks=self.sinks,
        )
        training.written_through = self._written_through
        self._training = training
        training.sampler.start()

    def _unstarted_copy(self, copy_value: Callable[[object], object], memo: dict):
        """A monitor with this one's settings and none of its live state or Keras binding."""
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        unstarted = _unstarted_state()
        for name, value in vars(self).items():
            clone.__dict__[name] = unstarted[name] if name in unstarted else copy_value(value)
        return clone

    def _steps_this_epoch(self) -> int | None:
        spe = getattr(self.model, "steps_per_execution", 1) or 1
        # With one step per execution, each batch hook is one training step: the hooks count
        # the batches trained also where the optimizer did not count a step (a
        # LossScaleOptimizer skipping non-finite gradients, a custom train_step that applies
        # none). The optimizer's count stays the floor: under JAX, Keras may run the last
        # hooks of an epoch after its end.
        hooks = self._last_batch + 1 if spe == 1 and self._last_batch is not None else None
        now = optimizer_steps(self.model)
        if now is not None and self._iterations_at_epoch_start is not None:
            epoch = self.params.get("steps") if self.params else None
            iterations = now - self._iterations_at_epoch_start
            if iterations == 0 and self._last_batch is not None:
                return self._count_own_steps(self._last_batch + 1)
            counted = trained_steps(iterations, self._last_batch, epoch, spe)
            return max(counted, hooks or 0)
        if hooks is not None:
            return hooks
        return self.params.get("steps") if self.params else None

    def _count_own_steps(self, steps: int) -> int:
        """An epoch that trained ``steps`` batches while ``model.optimizer`` took no step: the
        model steps optimizers of its own (a GAN's ``d_optimizer`` and ``g_optimizer``, with
        ``super().compile()`` leaving ``model.optimizer`` an unused default), so from now on
        the monitor counts the steps itself; the step axis goes on from the epoch's start."""
        start = self._own_steps if self._own_steps is not None else self._iterations_at_epoch_start
        self._own_steps = (start or 0) + steps
        return steps

    def _epoch_first_step(self) -> int | None:
        """Steps completed when the epoch begins: the optimizer's count, or the monitor's own
        where the model's optimizer does not step (:meth:`_count_own_steps`)."""
        self._iterations_at_epoch_start = optimizer_steps(self.model)
        if self._own_steps is not None:
            return self._own_steps
        return self._iterations_at_epoch_start

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
            append_file=self._append_event_file,
        )

    def _begin_call(self, phase: str) -> None:
        """``evaluate`` or ``predict`` outside ``fit``: measure the call on its own."""
        call = find_fit(phase)
        count = self._call_count(phase)
        self._calls.begin(
            phase,
            lambda append_to: start_run(
                self._run_settings(),
                os.path.join(self.run_dir, phase),
                call,
                batch_size=call_batch_size(phase, self.batch_size),
                count=None if count is None or self.batch_size is not None else count.snapshot,
                waited=self._waited(count, phase, self._worker_folder is not None),
                on_abandoned=self._abandon,
                on_sample=self._window_tick,
                phase=phase,
                append_to=append_to,
            ),
            self.params.get("steps") if self.params else None,
        )

    def _measuring_a_call(self) -> bool:
        """Whether an ``evaluate`` or ``predict`` call outside ``fit`` is being measured."""
        return self._calls.run is not None

    def _waited(
        self, count: ExampleCount | None, phase: str, multi_worker: bool
    ) -> Callable[[], float | None] | None:
        """What reads the seconds ``phase`` waited for its batches (``input_wait.waited_reader``);
        ``None``, and nothing said, where ``input_wait=False`` left the share out."""
        return waited_reader(count, phase, multi_worker) if self.input_wait else None

    def _call_count(self, phase: str) -> ExampleCount | None:
        """The count of the examples of the ``evaluate`` (an epoch's validation too) or
        ``predict`` call on the stack, with its wait, where one can be kept and no
        multi-worker cluster shares the batch out (its examples are used where no
        ``batch_size`` was given). Nothing to detach: the call's iterator goes with the call
        (a cached validation iterator is counted anew each epoch)."""
        if self._worker_folder is not None:
            return None
        return attach_to_fit(phase, self._clock, timed=self.input_wait)

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

    def _input_batch_size(self, fit_call: object, multi_worker: bool) -> int | None:
        """Examples per step of this fit where it has a constant batch, and the count of the
        examples it trains (exact, short batches included) unless ``batch_size`` was given;
        with the checks of the input and the epoch. Each worker of a multi-worker cluster
        trains a share of the global batch: there the global batch size is used."""
        if fit_call is not None:
            found = fit_locals("steps_per_epoch")
            warn_partial_execution(
                found.get("steps_per_epoch"), getattr(self.model, "steps_per_execution", 1)
            )
        if fit_call is not None and not multi_worker:  # the wait is timed by the count
            self._example_count = attach_to_fit("fit", self._clock, timed=self.input_wait)
        if self._example_count is not None and self.batch_size is None:
            return fit_batch_size()  # for the sinks and where the count cannot tell
        return global_batch_size(self.batch_size, in_fit=fit_call is not None)

    def _close_if_left(self) -> None:
        """Close the monitor where every call it measures was left without its end hook (an
        exception, Ctrl-C), without waiting for its sampler to notice at its next sample."""
        runs = [run for run in (self._training, self._calls.run) if run is not None]
        if runs and not any(run.sampler.watching() for run in runs):
            self._shutdown()

    def _shutdown(self) -> None:
        if self._example_count is not None:
            self._example_count.detach()
            self._example_count = None
        self._calls.close()
        training, self._training = self._training, None
        if training is not None:
            training.sampler.stop()  # joins the thread, so an abandon in progress ends first
            training.finish()
            self._written_through = training.written_through
