"""One trial's model: built fresh under its setup, warmed up once, then timed on demand.

A runner stays alive for all of its rounds, so tracing and XLA compilation happen once, in
the warm-up, and each timed run is ``steps`` steps of an already compiled train function.
Every runner starts from the same seed, so its initial weights (and dropout draws) equal the
baseline's and the warm-up losses can be compared.
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import keras

from tfthroughput._validation import check_model
from tfthroughput.diagnosis.trial_memory import PeakAdded, release_free_memory, to_mib
from tfthroughput.precision.policy import check_mixed_precision_outputs, mixed_precision
from tfthroughput.precision.xla import is_xla_failure
from tfthroughput.tuning.distribution import replica_failure
from tfthroughput.tuning.loss_check import reported_loss
from tfthroughput.tuning.setup import TuneSetup


class TrialFailed(Exception):
    """A trial that cannot be chosen; the message is the reason shown in the table."""


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


def _reason(error: BaseException) -> str:
    known = replica_failure(error)
    if known is not None:
        return known
    lines = str(error).strip().splitlines()
    first = (lines[0] if lines else "")[:160]
    if is_xla_failure(error):
        return f"XLA could not compile the train step ({first})"
    name = type(error).__name__
    if name == "ResourceExhaustedError" or isinstance(error, MemoryError):
        return f"out of memory ({name}: {first})"
    return f"{name}: {first}" if first else name


class Runner:
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

    ``steps`` (and ``warmup_steps``) ``None``: each run is an epoch to the data's end.
    """

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
    ) -> None:
        self.setup = setup
        self.warmup_steps = warmup_steps or steps
        self._batch_size = batch_size
        self._build_model = build_model
        self._feed = feed
        self.steps = steps
        self.examples_per_step = examples_per_step
        self._seed = seed
        self._clock = clock
        self._warm_data = warm_data
        self._callbacks = tuple(callbacks)
        self.model: keras.Model | None = None
        self.warmup_seconds = 0.0
        self.warmup_loss = math.nan
        self.memory_mib: float | None = None
        self.notes: list[str] = []

    def start(self, *, user_model_errors: bool = False) -> None:
        """Build, configure and warm up. Raises :class:`TrialFailed` with the reason.

        With ``user_model_errors``, a builder that returns no compiled model raises its own
        ``TypeError``/``ValueError`` (the baseline: the user must fix the builder)."""
        release_free_memory()
        with PeakAdded() as memory:
            start = self._clock()
            call_builder(self._build, _reason, user_model_errors=user_model_errors)
            if self._warm_data is not None:
                self._warm_data()
            self.warmup_loss = self._fit(self.warmup_steps)[1]
            self.warmup_seconds = self._clock() - start
        self.memory_mib = to_mib(_device_peak_bytes() or memory.added)

    def run(self) -> float:
        """Seconds of one timed run of ``steps`` steps."""
        return self._fit(self.steps)[0]

    def set_steps(self, steps: int, feed: dict[str, Any]) -> None:
        """Make later timed runs ``steps`` steps long, fed from ``feed`` (longer runs need
        more data from arrays)."""
        self.steps, self._feed = steps, feed

    def close(self) -> None:
        """Drop the model and collect it, so the next trial has its memory."""
        self.model = None
        gc.collect()

    def _build(self) -> None:
        self.model, self.setup, notes = trial_model(
            self._build_model,
            self.setup,
            seed=self._seed,
            batch_size=self._batch_size,
            loop="train",
        )
        self.notes += notes

    def _fit(self, steps: int | None) -> tuple[float, float]:
        timer = _EpochSeconds(self._clock)
        try:
            history = self.model.fit(
                **self._feed,
                epochs=1,
                steps_per_epoch=steps,
                verbose=0,
                callbacks=timer.around(self._callbacks),
            )
        except Exception as error:  # noqa: BLE001 - OOM, XLA, ...: reported with the reason
            raise TrialFailed(_reason(error)) from error
        try:
            loss, note = reported_loss(history.history)
        except ValueError as error:
            raise TrialFailed(str(error)) from error
        if note is not None and note not in self.notes:
            self.notes.append(note)
        if not math.isfinite(loss):
            raise TrialFailed(f"the loss is {loss} after {steps} steps")
        if len(timer.seconds) != 1:
            raise TrialFailed("fit stopped before the end of the epoch (stop_training was set)")
        return timer.seconds[0], loss


def call_builder(
    build: Callable[[], None],
    reason: Callable[[BaseException], str],
    *,
    user_model_errors: bool = False,
) -> None:
    """Call ``build``; what it raises becomes :class:`TrialFailed` with ``reason(error)``.

    With ``user_model_errors``, its ``TypeError``/``ValueError`` passes unchanged (the
    baseline: the user must fix the builder)."""
    try:
        build()
    except TrialFailed:
        raise
    except (TypeError, ValueError) as error:
        if user_model_errors:
            raise
        raise TrialFailed(reason(error)) from error
    except Exception as error:  # noqa: BLE001 - a failing trial is reported, not raised
        raise TrialFailed(reason(error)) from error


def trial_model(
    build_model: Callable[[], keras.Model],
    setup: TuneSetup | None,
    *,
    seed: int,
    batch_size: int | None,
    loop: str,
) -> tuple[keras.Model, TuneSetup, list[str]]:
    """A fresh model from ``seed`` (so every trial starts from the baseline's weights), its
    setup, and its low-precision warnings: :func:`configured_model` under ``setup``, or the
    model as given (``setup`` ``None``), whose setup is read from it at ``batch_size``.

    Args:
        build_model: The user's builder.
        setup: The knobs, or ``None`` for the model as given.
        seed: Seed set before the model is built.
        batch_size: The batch of the model as given.
        loop: ``"train"`` (the model must be compiled) or ``"predict"``.
    """
    keras.utils.set_random_seed(seed)
    if setup is not None:
        model, notes = configured_model(build_model, setup, loop=loop)
        return model, setup, notes
    model = check_model(build_model(), returned_by="build_model", compiled=loop == "train")
    given = TuneSetup(
        int(getattr(model, "steps_per_execution", 1) or 1),
        bool(model.jit_compile),
        keras.config.dtype_policy().name,
        batch_size=batch_size,
    )
    return model, given, []


def configured_model(
    build_model: Callable[[], keras.Model], setup: TuneSetup, *, loop: str
) -> tuple[keras.Model, list[str]]:
    """A model built under ``setup``'s policy with its ``steps_per_execution`` and XLA, and
    the first sentence of each low-precision warning the build gave.

    Args:
        build_model: The user's builder.
        setup: The knobs.
        loop: ``"train"`` (the model must be compiled; its outputs' precision is checked
            here, where a float16 loss would start) or ``"predict"`` (no compile needed;
            its outputs are compared with the baseline's by the output check instead).

    Raises:
        TrialFailed: If a layer does not support XLA and ``setup`` turns it on.
    """
    training = loop == "train"
    with mixed_precision(setup.policy), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = check_model(build_model(), returned_by="build_model", compiled=training)
        model.steps_per_execution = setup.steps_per_execution
        model.jit_compile = setup.jit_compile
        if setup.jit_compile and not model.jit_compile:
            raise TrialFailed("a layer of the model does not support XLA (Keras says so)")
        setattr(model, f"{loop}_function", None)  # rebuilt with the knobs on the next call
        if training and setup.policy != "float32":
            with contextlib.suppress(ValueError):  # not built yet: checked after warm-up
                check_mixed_precision_outputs(model)
    ours = {str(w.message).split(". ")[0] for w in caught if "low precision" in str(w.message)}
    return model, sorted(ours)


def _device_peak_bytes() -> int | None:
    """Peak memory of the first GPU where the backend tells it (TensorFlow, JAX), else None."""
    tf = sys.modules.get("tensorflow")
    if keras.backend.backend() == "tensorflow" and tf is not None:
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            try:
                peak = tf.config.experimental.get_memory_info(gpus[0].name)["peak"]
                tf.config.experimental.reset_memory_stats(gpus[0].name)
                return int(peak)
            except (ValueError, RuntimeError):
                return None
    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform == "gpu":
            stats = device.memory_stats() or {}
            return stats.get("peak_bytes_in_use")
    return None
