"""What a trial's runner is in either mode: a fresh model built under the trial's setup (or
as given), started once (its warm-up timed, its memory measured), then timed on demand.

A runner stays alive for all of its rounds, so tracing and XLA compilation happen once, in
the warm-up. Every runner starts from the same seed, so its initial weights equal the
baseline's and its first results can be compared with the baseline's. What a warm-up and a
timed run are is the mode's: :class:`~tfthroughput.tuning.training.fit_runner.FitRunner` (``fit``)
and :class:`~tfthroughput.tuning.inference.predict_runner.PredictRunner` (``predict``).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import Any

import keras

from tfthroughput.diagnosis.trial_memory import PeakAdded, release_free_memory, to_mib
from tfthroughput.tuning.engine.trial_model import (
    USER_MODEL_ERRORS,
    device_peak_bytes,
    trial_failures,
    trial_model,
)
from tfthroughput.tuning.setup import TuneSetup


class TrialRunner:
    """A trial's model for ``setup``: built, warmed up and measured by :meth:`start`, timed
    ``steps`` at a time by :meth:`run`, dropped by :meth:`close`.

    Args:
        setup: The knobs; ``None`` for the model as given (its setup is read after the build,
            with ``batch_size``).
        build_model: The user's builder.
        steps: Steps (batches) per timed run.
        seed: Seed set before the model is built.
        clock: Seconds clock.
        batch_size: The batch of the model as given.

    Subclasses set :attr:`loop` and :attr:`host_memory` and define :meth:`_warm_up` and
    :meth:`run`.
    """

    # Keras's loop the trial runs (``"train"``, ``"predict"``): what the model needs (a
    # compiled one for ``"train"``) and the words of a failure's reason.
    loop: str
    # Whether ``memory_mib`` falls back to the process's peak RSS added by the start where the
    # backend tells no device peak (``TuneTrial.memory_mib``), or stays ``None``.
    host_memory: bool
    # Starts so far in this process: a model that last ran before a later start runs its next
    # work slower, once (``FitRunner.rewarm``).
    starts = 0

    def __init__(
        self,
        setup: TuneSetup | None,
        build_model: Callable[[], keras.Model],
        *,
        steps: int | None,
        seed: int,
        clock: Callable[[], float],
        batch_size: int | None,
    ) -> None:
        self.setup = setup
        self._build_model = build_model
        self.steps = steps
        self._seed = seed
        self._clock = clock
        self._batch_size = batch_size
        self.model: keras.Model | None = None
        self.examples_per_step = 0
        self.warmup_seconds = 0.0
        self.memory_mib: float | None = None
        self.notes: list[str] = []
        self.solo_speed: float | None = None  # examples/s of its own lengthened run

    def start(self, *, user_model_errors: bool = False) -> None:
        """Build, configure and warm up; ``warmup_seconds`` and ``memory_mib`` are this
        start's. Raises ``TrialFailed`` (``engine.trial_model``) with the reason.

        With ``user_model_errors``, a builder that returns no (compiled) model raises its own
        ``TypeError``/``ValueError`` (the baseline: the user must fix the builder)."""
        TrialRunner.starts += 1
        with self._measured_memory():
            start = self._clock()
            with trial_failures(self.loop, USER_MODEL_ERRORS if user_model_errors else ()):
                self._build()
            self._warm_up()
            self.warmup_seconds = self._clock() - start

    def run(self) -> float:
        """Seconds of one timed run of ``steps`` steps."""
        raise NotImplementedError

    @property
    def reference(self) -> Any:
        """What a later trial may be checked against exactly; nothing by default."""
        return None

    def before_round(self) -> None:
        """Untimed work before each alternated round; nothing by default."""

    def figures(self) -> dict[str, Any]:
        """Its trial's fields besides the comparison's."""
        return {
            "warmup_seconds": self.warmup_seconds,
            "memory_mib": self.memory_mib,
            "reason": "; ".join(self.notes),
        }

    def rewarm(self) -> None:
        """One short untimed run before a comparison's rounds, where the mode needs it and
        another model was started since this one last ran (see
        :meth:`FitRunner.rewarm <tfthroughput.tuning.training.fit_runner.FitRunner.rewarm>`)."""

    def close(self) -> None:
        """Drop the model and collect it, so the next trial has its memory."""
        self.model = None
        gc.collect()

    def _warm_up(self) -> None:
        """What the start runs after the build: the mode's first, untimed work."""
        raise NotImplementedError

    def _build(self) -> None:
        self.model, self.setup, notes = trial_model(
            self._build_model,
            self.setup,
            seed=self._seed,
            batch_size=self._batch_size,
            loop=self.loop,
        )
        self.notes += notes

    @contextlib.contextmanager
    def _measured_memory(self) -> Iterator[None]:
        """Sets ``memory_mib`` to the peak of the block: the device's, else (with
        :attr:`host_memory`) the process's RSS it added."""
        if self.host_memory:
            release_free_memory()  # what earlier trials left behind is not counted
        device_peak_bytes()  # resets the device's peak, so the trial's own is read after
        with PeakAdded() if self.host_memory else contextlib.nullcontext() as host:
            yield
        peak = device_peak_bytes()
        if not peak and host is not None:
            peak = host.added
        self.memory_mib = to_mib(peak)
