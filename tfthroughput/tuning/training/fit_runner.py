"""A training trial's runner: its model trained by ``fit``, ``steps`` steps per timed run.

Each timed run is ``steps`` steps of an already compiled train function, timed by epoch
hooks around the user's callbacks. The warm-up's mean loss is the one the loss check
compares with the baseline's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import keras

from tfthroughput.tuning.engine.trial_model import TrialFailed, trial_failures
from tfthroughput.tuning.engine.trial_runner import TrialRunner
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training.loss_check import reported_loss
from tfthroughput.tuning.training.strategy_build import build_from_spec


class _EpochSeconds(keras.callbacks.Callback):
    """Times each epoch with epoch hooks only, so Keras keeps dispatching steps asynchronously;
    an epoch ends with Keras reading the loss back, so its time covers the steps' execution.

    :meth:`around` puts its start before and its end after the user's callbacks, so their
    epoch hooks are timed too, as they are in the user's epochs."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self._clock = clock
        self._start = 0.0
        self.seconds: list[float] = []

    def begin(self) -> None:
        self._start = self._clock()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(self._clock() - self._start)

    def around(self, callbacks: Sequence[keras.callbacks.Callback]) -> list:
        return [_EpochStart(self), *callbacks, self]


class _EpochStart(keras.callbacks.Callback):
    def __init__(self, timer: _EpochSeconds) -> None:
        super().__init__()
        self._timer = timer

    def on_epoch_begin(self, epoch, logs=None):
        self._timer.begin()


class FitRunner(TrialRunner):
    """A fresh model for ``setup``, fed by ``feed``, timed ``steps`` steps at a time.

    Args:
        setup: The knobs; ``None`` for the model as given (its setup is read after the build,
            with ``batch_size``).
        build_model: The user's builder.
        feed: ``fit`` arguments (data) yielding at least ``steps`` batches.
        steps: Steps per timed run, a multiple of the setup's ``steps_per_execution``.
        examples_per_step: Examples in one step, for examples/s.
        seed: Seed set before the model is built.
        clock: Seconds clock.
        warm_data: Called once before the warm-up (fills a cache: a full pass of the data).
        warmup_steps: Steps of the warm-up (whose mean loss is compared); defaults to
            ``steps``.
        callbacks: The user's callbacks, run in every ``fit`` (the confirmation's epochs).
        check_feed: ``fit`` arguments of the warm-up (whose loss is checked) where they are
            not ``feed``: the replayed batches (``replay``), which have the input's own
            element spec, so the timed runs trace nothing again.

    ``steps`` (and ``warmup_steps``) ``None``: each run is an epoch to the data's end.
    """

    loop = "train"
    host_memory = True

    def __init__(
        self,
        setup: TuneSetup | None,
        build_model: Callable[[], keras.Model],
        feed: dict[str, Any],
        *,
        steps: int | None,
        examples_per_step: int,
        seed: int,
        clock: Callable[[], float],
        warm_data: Callable[[], None] | None = None,
        batch_size: int | None = None,
        warmup_steps: int | None = None,
        callbacks: Sequence[keras.callbacks.Callback] = (),
        check_feed: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            setup, build_model, steps=steps, seed=seed, clock=clock, batch_size=batch_size
        )
        self.warmup_steps = warmup_steps or steps
        self._feed = feed
        self._check_feed = check_feed
        self.examples_per_step = examples_per_step
        self._warm_data = warm_data
        self._callbacks = tuple(callbacks)
        self.warmup_loss = math.nan
        self._last_ran_at_start = 0  # TrialRunner.starts when this model last ran

    def run(self) -> float:
        """Seconds of one timed run of ``steps`` steps."""
        return self._fit(self.steps)[0]

    def run_second_epoch(self) -> float:
        """Seconds of the second epoch of a two-epoch ``fit``: an epoch as it runs inside the
        user's own many-epoch ``fit``, where its input's iterator and prefetching are already
        going (a ``fit``'s first epoch starts them, a cost the user pays once per ``fit``)."""
        return self._fit(self.steps, epochs=2)[0]

    def rewarm(self) -> None:
        """One untimed execution (``steps_per_execution`` steps), because a model warmed up
        before other models were built runs its next ``fit`` slower, once: without it every
        trial's first round would carry that on one side (``docs/tuning.md``, "Why the search
        is shaped so"). Nothing runs where no model was started since this one last ran (a
        trial's new candidate)."""
        if self._last_ran_at_start != TrialRunner.starts:
            self._fit(int(self.model.steps_per_execution or 1))

    def fed_otherwise(self, feed: dict[str, Any], *, steps: int) -> FitRunner:
        """A runner of this started runner's own model fed by ``feed`` (the compute-only
        probe: one batch from memory), ``steps`` steps per timed run; its start runs one
        untimed run of them and builds nothing."""
        return _SameModel(self, feed, steps=steps)

    def set_steps(self, steps: int, feed: dict[str, Any]) -> None:
        """Make later timed runs ``steps`` steps long, fed from ``feed`` (longer runs need
        more data from arrays)."""
        self.steps, self._feed = steps, feed

    def _warm_up(self) -> None:
        if self._warm_data is not None:
            self._warm_data()
        self.warmup_loss = self._fit(self.warmup_steps, self._check_feed)[1]

    def _fit(
        self, steps: int | None, feed: dict[str, Any] | None = None, epochs: int = 1
    ) -> tuple[float, float]:
        """Seconds of the last of ``epochs`` epochs, and the loss ``fit`` reports."""
        timer = _EpochSeconds(self._clock)
        feed = feed or self._feed
        with trial_failures(self.loop):
            build_from_spec(self.model, feed)
            history = self.model.fit(
                **feed,
                epochs=epochs,
                steps_per_epoch=steps,
                verbose=0,
                callbacks=timer.around(self._callbacks),
            )
        try:
            loss, note = reported_loss(history.history)
        except ValueError as error:
            raise TrialFailed(str(error)) from error
        if note is not None and note not in self.notes:
            self.notes.append(note)
        if not math.isfinite(loss):
            raise TrialFailed(f"the loss is {loss} after {steps} steps")
        if len(timer.seconds) != epochs:
            raise TrialFailed("fit stopped before the end of the epoch (stop_training was set)")
        self._last_ran_at_start = TrialRunner.starts
        return timer.seconds[-1], loss


class _SameModel(FitRunner):
    """Another started runner's model, fed another way: the two sides of a comparison differ
    by their input only, and no second model is built, traced or held. The compute-only probe
    on a model of its own cost a whole start (the build, the tracing, on XLA the compilation)
    to learn what the baseline's model does without its input pipeline. Its memory is the
    owner's: ``memory_mib`` stays ``None``."""

    def __init__(self, owner: FitRunner, feed: dict[str, Any], *, steps: int) -> None:
        super().__init__(
            owner.setup,
            owner._build_model,
            feed,
            steps=steps,
            examples_per_step=owner.examples_per_step,
            seed=owner._seed,
            clock=owner._clock,
            batch_size=owner._batch_size,
            callbacks=owner._callbacks,
        )
        self._owner = owner

    def start(self, *, user_model_errors: bool = False) -> None:
        """The owner's model, one untimed run on this feed (``warmup_seconds``); no model is
        built, so no later-built model counts against the others (``TrialRunner.starts``)."""
        start = self._clock()
        self.model = self._owner.model
        self._warm_up()
        self.warmup_seconds = self._clock() - start
