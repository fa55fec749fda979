"""One inference trial's model: built fresh under its setup, warmed up once, then timed.

A runner stays alive for all of its rounds, so tracing and XLA compilation happen once, in
the warm-up. A timed run is one ``predict`` call over ``steps`` batches, timed from the start
of its second execution to the call's return (outputs copied back to the host included):
``predict``'s set-up (its data adapter and iterator: 0.1-0.3 s per call on the development
machine) is paid once per call whatever the knobs, once in a batch job, and would otherwise
swamp short runs. The latency of one batch is one
``predict_on_batch`` call on a batch of the trial's size: what a server answering one request
of that many examples waits; ``steps_per_execution`` groups batches inside ``predict`` only,
so it leaves that figure unchanged.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import keras

from tfthroughput._validation import leading_dimension
from tfthroughput.diagnosis.trial_memory import to_mib
from tfthroughput.tuning._inference_data import InferenceData
from tfthroughput.tuning._trial_model import (
    USER_MODEL_ERRORS,
    TrialFailed,
    device_peak_bytes,
    trial_failures,
    trial_model,
)
from tfthroughput.tuning.setup import TuneSetup


class _FromExecution(keras.callbacks.Callback):
    """Reads the clock when the execution starting at batch ``first`` or later begins.

    A batch-*begin* hook gets no outputs, so Keras keeps dispatching asynchronously."""

    def __init__(self, clock: Callable[[], float], first: int) -> None:
        super().__init__()
        self._clock, self._first = clock, first
        self.start: float | None = None
        self.timed_from = 0

    def on_predict_batch_begin(self, batch, logs=None):
        if self.start is None and batch >= self._first:
            self.timed_from = batch
            self.start = self._clock()


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` (linear between the closest ranks)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class PredictRunner:
    """A fresh model for ``setup``, predicting ``steps`` batches per timed run.

    Args:
        setup: The knobs; ``None`` for the model as given (its setup is read after the build,
            with ``data.batch_size``).
        build_model: The user's builder.
        data: The inputs.
        steps: Batches per timed run.
        warmup_steps: Batches of the warm-up ``predict`` (at least two executions).
        seed: Seed set before the model is built.
        clock: Seconds clock.
    """

    def __init__(
        self,
        setup: TuneSetup | None,
        build_model: Callable[[], keras.Model],
        data: InferenceData,
        *,
        steps: int,
        warmup_steps: int,
        seed: int,
        clock: Callable[[], float],
    ) -> None:
        self.setup = setup
        self._build_model = build_model
        self._data = data
        self.steps = steps
        self._warmup_steps = warmup_steps
        self._seed = seed
        self._clock = clock
        self.model: keras.Model | None = None
        self.examples_per_step = 0
        self.warmup_seconds = 0.0
        self.memory_mib: float | None = None
        self.outputs: Any = None
        self.latencies: list[float] = []
        self.notes: list[str] = []
        self._batch: Any = None
        self._feed: dict[str, Any] = {}

    def start(self, *, user_model_errors: bool = False) -> None:
        """Build, configure, warm up and predict the check examples. Raises
        :class:`TrialFailed` with the reason; with ``user_model_errors``, a builder that
        returns no model raises its own ``TypeError``."""
        device_peak_bytes()  # resets the device's peak, so the trial's own is read after
        start = self._clock()
        with trial_failures("predict", USER_MODEL_ERRORS if user_model_errors else ()):
            self._build()
        size = self.setup.batch_size
        self.examples_per_step = size if size is not None else self._data.batch_examples()
        self._feed = self._data.feed(size, self.steps)
        self._batch = self._data.one_batch(size)
        with trial_failures("predict"):
            # At least two whole executions, so the timed runs' function is the one traced.
            warmup = max(self._warmup_steps, 2 * self.setup.steps_per_execution)
            self.model.predict(**self._data.feed(size, warmup), verbose=0)
            self.model.predict_on_batch(self._batch)
            self.outputs = self.model.predict(**self._data.check_feed(size), verbose=0)
        self.warmup_seconds = self._clock() - start
        self.memory_mib = to_mib(device_peak_bytes())

    def run(self) -> float:
        """Seconds of ``steps`` batches of ``predict`` (the timed part of one call, scaled to
        ``steps`` batches)."""
        timer = _FromExecution(self._clock, self.setup.steps_per_execution)
        with trial_failures("predict"):
            self.model.predict(**self._feed, verbose=0, callbacks=[timer])
        end = self._clock()
        if timer.start is None or timer.timed_from >= self.steps:
            raise TrialFailed(f"predict ran fewer than {self.steps} batches")
        return (end - timer.start) * self.steps / (self.steps - timer.timed_from)

    def whole_call(self, feed: dict[str, Any]) -> tuple[float, int]:
        """Seconds of one whole ``predict`` call on ``feed``, from the call to its return
        (its set-up included: the confirmation times what the user's call costs), and the
        examples it predicted."""
        start = self._clock()
        with trial_failures("predict"):
            outputs = self.model.predict(**feed, verbose=0)
        return self._clock() - start, leading_dimension(outputs)

    def sample_latency(self, count: int) -> None:
        """Time ``count`` single-batch calls (``predict_on_batch``, outputs on the host)."""
        for _ in range(count):
            start = self._clock()
            with trial_failures("predict"):
                self.model.predict_on_batch(self._batch)
            self.latencies.append(self._clock() - start)

    def latency_ms(self, fraction: float) -> float | None:
        """The ``fraction`` quantile of the sampled latencies, in milliseconds."""
        return 1000.0 * percentile(self.latencies, fraction) if self.latencies else None

    def set_steps(self, steps: int) -> None:
        """Make later timed runs ``steps`` batches long."""
        self.steps = steps
        self._feed = self._data.feed(self.setup.batch_size, steps)

    def close(self) -> None:
        """Drop the model and collect it, so the next trial has its memory."""
        self.model = None
        self._batch = self._feed = None
        gc.collect()

    def _build(self) -> None:
        size = self._data.batch_size
        self.model, self.setup, notes = trial_model(
            self._build_model, self.setup, seed=self._seed, batch_size=size, loop="predict"
        )
        self.notes += notes
