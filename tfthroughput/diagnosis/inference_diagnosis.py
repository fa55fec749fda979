"""Find the bottleneck of batch inference (``model.predict``): input pipeline, compute, or
per-batch overhead. ``diagnose(..., mode="inference")`` runs it."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tfthroughput._validation import check_model, check_positive_int
from tfthroughput.data.benchmark import benchmark_dataset, leading_dimension, rate
from tfthroughput.diagnosis._arguments import check_precision, probe_readings
from tfthroughput.diagnosis._pipeline_facts import lint_or_none, slowest_stage
from tfthroughput.diagnosis.diagnosis_report import INFERENCE, DiagnosisReport
from tfthroughput.diagnosis.inference_recommendations import inference_recommendations
from tfthroughput.diagnosis.recommendations import SPEED_RULES
from tfthroughput.diagnosis.verdict import (
    BALANCED,
    INPUT_BOUND,
    DiagnosisThresholds,
    input_bound_fraction,
    per,
    verdict,
)
from tfthroughput.hardware.utilization import gpu_utilization

# Batches held in memory for the predict-step-only measurement (b), as for training.
_CACHED_BATCHES = 4


def diagnose_inference(
    model: keras.Model,
    dataset: tf.data.Dataset,
    *,
    steps: int = 20,
    repeats: int = 3,
    thresholds: DiagnosisThresholds | None = None,
    utilization_probe: Any = gpu_utilization,
    clock: Callable[[], float] = time.perf_counter,
    precision: Any = None,
) -> DiagnosisReport:
    """Measure where batch inference's time goes, and say what to change.

    Three measurements, as :func:`~tfthroughput.diagnose` makes for training, each repeated
    ``repeats`` times (the median is kept):

    (a) the input pipeline alone: ``benchmark_dataset`` over ``steps + 1`` batches;
    (b) the predict step alone: ``model.predict`` on a few batches taken from ``dataset`` and
        cached in memory;
    (c) both together: ``model.predict`` on ``dataset`` itself.

    Each ``predict`` call runs ``steps`` untimed batches (tracing, XLA compilation, the
    pipeline filling) and then ``steps`` timed ones, from the end of the last untimed batch to
    the end of the call, so the time covers the outputs' copy back to the host as ``predict``
    pays it. The verdict and the input-bound fraction follow the same rules as for training,
    with the predict step in place of the training step; the recommendations fit inference:
    the batch size for throughput, ``steps_per_execution``, XLA, mixed precision and the
    pipeline. Nothing of the model changes (``predict`` trains nothing); it need not be
    compiled.

    Args:
        model: A Keras 3 model.
        dataset: The ``tf.data.Dataset`` of batches ``predict`` would get (``x`` alone, or
            ``(x, y)`` whose ``y`` is ignored); repeated as needed.
        steps: Batches timed per repeat. Defaults to ``20``.
        repeats: Timed repeats of each measurement. Defaults to ``3``.
        thresholds: Verdict thresholds. Defaults to ``DiagnosisThresholds()``.
        utilization_probe: As for :func:`~tfthroughput.diagnose`, entered around the timed
            batches of each (c) call. ``None``: not measured.
        clock: Seconds-returning clock. Defaults to ``time.perf_counter``.
        precision: The :class:`~tfthroughput.PrecisionRecommendation` to agree with.
            Defaults to ``recommend_precision()`` here.

    Returns:
        A :class:`~tfthroughput.diagnosis.DiagnosisReport` with ``mode="inference"``: its
        ``fit_batches_per_second`` is (c), ``predict`` with input and compute together.

    Raises:
        TypeError, ValueError: For invalid arguments, naming the argument and the value; or
            when ``dataset`` yields nothing.

    Example:
        >>> report = diagnose_inference(model, test_ds, steps=50)  # doctest: +SKIP
        >>> report.verdict  # doctest: +SKIP
        'launch-overhead-bound'
    """
    check_model(model, compiled=False)  # predict needs no optimizer
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"`dataset` must be a tf.data.Dataset. Received: dataset={dataset!r} "
            f"of type {type(dataset).__name__}"
        )
    check_positive_int("steps", steps)
    check_positive_int("repeats", repeats)
    thresholds = DiagnosisThresholds() if thresholds is None else thresholds
    if not isinstance(thresholds, DiagnosisThresholds):
        raise TypeError(
            "`thresholds` must be a DiagnosisThresholds or None. "
            f"Received: thresholds={thresholds!r}"
        )
    if utilization_probe is not None and not callable(utilization_probe):
        raise TypeError(
            "`utilization_probe` must be a callable returning a context manager, or None. "
            f"Received: utilization_probe={utilization_probe!r}"
        )
    if not callable(clock):
        raise TypeError(f"`clock` must be callable. Received: clock={clock!r}")
    precision = check_precision(precision)

    first_batch = next(iter(dataset.take(1)), None)
    if first_batch is None:
        raise ValueError(f"`dataset` yielded no batch. Received: dataset={dataset!r}")
    batch_size = leading_dimension(first_batch)
    repeated = dataset.repeat()
    in_memory = (
        dataset.take(min(_CACHED_BATCHES, steps)).cache().repeat().prefetch(tf.data.AUTOTUNE)
    )
    input_rates = [
        benchmark_dataset(repeated, steps + 1, clock=clock).batches_per_second
        for _ in range(repeats + 1)
    ][1:]
    compute_seconds: list[float] = []
    predict_seconds: list[float] = []
    utilizations: list[float] = []
    sm_activities: list[float] = []
    for _ in range(repeats):  # (b) and (c) alternate, so that load hits both alike
        compute_seconds.append(_timed_predict(model, in_memory, steps, clock, None)[0])
        seconds, utilization, sm_activity = _timed_predict(
            model, repeated, steps, clock, utilization_probe
        )
        predict_seconds.append(seconds)
        if utilization is not None:
            utilizations.append(utilization)
        if sm_activity is not None:
            sm_activities.append(sm_activity)

    utilization = sum(utilizations) / len(utilizations) if utilizations else None
    sm_activity = sum(sm_activities) / len(sm_activities) if sm_activities else None
    input_rate = statistics.median(input_rates)
    compute_rate = rate(steps, statistics.median(compute_seconds))
    predict_rate = rate(steps, statistics.median(predict_seconds))
    fraction = input_bound_fraction(compute_rate, predict_rate)
    decided = verdict(
        fraction,
        per(compute_rate),
        thresholds,
        gpu_utilization=utilization,
        sm_activity=sm_activity,
    )
    lint = lint_or_none(dataset)
    slowest = None
    if decided in (INPUT_BOUND, BALANCED) and input_rate < compute_rate and lint is not None:
        if not any(finding.rule in SPEED_RULES for finding in lint.findings):
            slowest = slowest_stage(repeated, steps)
    policy = getattr(model, "dtype_policy", None)
    return DiagnosisReport(
        batch_size=batch_size,
        steps=steps,
        repeats=repeats,
        input_batches_per_second=input_rate,
        compute_batches_per_second=compute_rate,
        fit_batches_per_second=predict_rate,
        input_bound_fraction=fraction,
        verdict=decided,
        recommendations=inference_recommendations(
            verdict=decided,
            batch_size=batch_size,
            input_rate=input_rate,
            compute_rate=compute_rate,
            predict_rate=predict_rate,
            fraction=fraction,
            compute_dtype=str(getattr(policy, "compute_dtype", "float32")),
            jit_compiled=bool(getattr(model, "jit_compile", False)),
            steps_per_execution=int(getattr(model, "steps_per_execution", 1) or 1),
            gpu_utilization=utilization,
            sm_activity=sm_activity,
            lint=lint,
            slowest_stage=slowest,
            precision=precision,
        ),
        gpu_utilization_percent=utilization,
        thresholds=thresholds,
        sm_activity_percent=sm_activity,
        mode=INFERENCE,
    )


class _PredictTimer(keras.callbacks.Callback):
    """Times a ``predict`` call from the end of its ``warm_up``-th batch to its end.

    TensorFlow's ``predict`` converts each batch's outputs to NumPy for its callbacks whether
    or not any callback has a batch hook, so this hook adds no device sync of its own.
    """

    def __init__(self, clock: Callable[[], float], warm_up: int, on_start: Callable[[], None]):
        super().__init__()
        self._clock = clock
        self._warm_up = warm_up
        self._on_start = on_start
        self.start: float | None = None
        self.timed_from = 0
        self.seconds: float | None = None

    def on_predict_batch_end(self, batch, logs=None):
        if self.start is None and batch + 1 >= self._warm_up:
            self._on_start()
            self.timed_from = batch + 1
            self.start = self._clock()

    def on_predict_end(self, logs=None):
        if self.start is not None:
            self.seconds = self._clock() - self.start


def _timed_predict(
    model: keras.Model,
    dataset: tf.data.Dataset,
    steps: int,
    clock: Callable[[], float],
    utilization_probe: Any,
) -> tuple[float, float | None, float | None]:
    """One ``predict`` of ``steps`` untimed then ``steps`` timed batches. Returns the seconds
    per ``steps`` batches, and the probe's GPU-Util and SM activity (``None`` if not read)."""
    with contextlib.ExitStack() as stack:
        readings: list[Callable[[], float | None]] = []

        def on_start() -> None:
            if utilization_probe is not None:
                readings.append(stack.enter_context(utilization_probe()))

        timer = _PredictTimer(clock, steps, on_start)
        model.predict(dataset, steps=2 * steps, verbose=0, callbacks=[timer])
    if timer.seconds is None or timer.timed_from >= 2 * steps:
        raise RuntimeError(f"`predict` ran fewer than {2 * steps} batches, so no timing was taken.")
    seconds = timer.seconds * steps / (2 * steps - timer.timed_from)
    return (seconds, *probe_readings(readings))
