"""An inference trial's runner: its model called by ``predict``, ``steps`` batches per timed run.

A timed run is one ``predict`` call over ``steps`` batches, timed from the start of its second
execution to the call's return (outputs copied back to the host included): ``predict``'s set-up
(its data adapter and iterator; its cost: ``docs/tuning.md``, "Inference") is paid once per
call whatever the knobs, once in a batch job, and would otherwise swamp short runs. The
latency of one batch is one ``predict_on_batch`` call on a batch of the trial's size: what a
server answering one request of that many examples waits; ``steps_per_execution`` groups
batches inside ``predict`` only, so it leaves that figure unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

from tfthroughput._validation import leading_dimension
from tfthroughput.tuning.engine.trial_model import TrialFailed, trial_failures
from tfthroughput.tuning.engine.trial_runner import TrialRunner
from tfthroughput.tuning.inference.data import InferenceData
from tfthroughput.tuning.setup import TuneSetup

LATENCY_SAMPLES = 5  # single-batch calls per runner before each round...
MOST_LATENCY_SAMPLES = 25  # ...until it holds this many (its first 5 rounds)


def latency_samples_due(held: int) -> int:
    """Single-batch calls to time before a round, for a runner holding ``held`` samples. Capped:
    on a heavy model a round's 10 calls cost about what its two timed runs do, and 25 calls
    spread over 5 rounds already give the p95 that the latency limit is judged by.

    Example:
        >>> latency_samples_due(0), latency_samples_due(22), latency_samples_due(25)
        (5, 3, 0)
    """
    return max(0, min(LATENCY_SAMPLES, MOST_LATENCY_SAMPLES - held))


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


class PredictRunner(TrialRunner):
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

    loop = "predict"
    host_memory = False

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
        super().__init__(
            setup, build_model, steps=steps, seed=seed, clock=clock, batch_size=data.batch_size
        )
        self._data = data
        self._warmup_steps = warmup_steps
        self.outputs: Any = None
        self.latencies: list[float] = []
        self._batch: Any = None
        self._feed: dict[str, Any] = {}

    def _warm_up(self) -> None:
        """Warm up and predict the check examples (into ``outputs``)."""
        size = self.setup.batch_size
        self.examples_per_step = size if size is not None else self._data.batch_examples()
        self._feed = self._data.feed(size, self.steps)
        self._batch = self._data.one_batch(size)
        with trial_failures(self.loop):
            # At least two whole executions, so the timed runs' function is the one traced.
            warmup = max(self._warmup_steps, 2 * self.setup.steps_per_execution)
            self.model.predict(**self._data.feed(size, warmup), verbose=0)
            self.model.predict_on_batch(self._batch)
            self.outputs = self.model.predict(**self._data.check_feed(size), verbose=0)

    def run(self) -> float:
        """Seconds of ``steps`` batches of ``predict`` (the timed part of one call, scaled to
        ``steps`` batches)."""
        timer = _FromExecution(self._clock, self.setup.steps_per_execution)
        with trial_failures(self.loop):
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
        with trial_failures(self.loop):
            outputs = self.model.predict(**feed, verbose=0)
        return self._clock() - start, leading_dimension(outputs)

    def sample_latency(self, count: int) -> None:
        """Time ``count`` single-batch calls (``predict_on_batch``, outputs on the host)."""
        for _ in range(count):
            start = self._clock()
            with trial_failures(self.loop):
                self.model.predict_on_batch(self._batch)
            self.latencies.append(self._clock() - start)

    @property
    def reference(self) -> Any:
        return self.outputs  # a steps_per_execution trial must match its parent's exactly

    def before_round(self) -> None:
        self.sample_latency(latency_samples_due(len(self.latencies)))

    def figures(self) -> dict[str, Any]:
        return {
            **super().figures(),
            "latency_p50_ms": self.latency_ms(0.5),
            "latency_p95_ms": self.latency_ms(0.95),
        }

    def latency_ms(self, fraction: float) -> float | None:
        """The ``fraction`` quantile of the sampled latencies, in milliseconds."""
        return 1000.0 * percentile(self.latencies, fraction) if self.latencies else None

    def set_steps(self, steps: int) -> None:
        """Make later timed runs ``steps`` batches long."""
        self.steps = steps
        self._feed = self._data.feed(self.setup.batch_size, steps)

    def close(self) -> None:
        self._batch = self._feed = None
        super().close()
