"""Find the bottleneck of batch inference (``model.predict``): input pipeline, compute, or
per-batch overhead. ``diagnose(..., mode="inference")`` runs it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tfthroughput.diagnosis._arguments import (
    DiagnosisArguments,
    check_diagnosis_arguments,
    probe_readings,
)
from tfthroughput.diagnosis._inputs import input_advice
from tfthroughput.diagnosis._measurement import (
    Datasets,
    Decision,
    Measurement,
    Rounds,
    decide,
    input_rates,
    prepare_datasets,
    summarize,
)
from tfthroughput.diagnosis.cpu_advice import cpu_advice
from tfthroughput.diagnosis.diagnosis_report import INFERENCE, DiagnosisReport
from tfthroughput.diagnosis.inference_recommendations import inference_recommendations
from tfthroughput.diagnosis.verdict import DiagnosisThresholds
from tfthroughput.hardware.utilization import gpu_utilization


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
    arguments = check_diagnosis_arguments(
        model, dataset, steps, repeats, thresholds, utilization_probe, clock, precision,
        compiled=False,
    )  # fmt: skip
    return _diagnose_checked(arguments)


def _diagnose_checked(arguments: DiagnosisArguments) -> DiagnosisReport:
    """Measure, decide and report, on arguments already checked (``diagnose`` checks them)."""
    datasets = prepare_datasets(arguments.dataset, arguments.steps)
    measured = _measure(arguments, datasets)
    decision = decide(arguments, measured, datasets.repeated)
    return _report(arguments, datasets.batch_size, measured, decision)


def _measure(arguments: DiagnosisArguments, datasets: Datasets) -> Measurement:
    """(a), then (b) and (c) alternated, so that load from other processes hits both alike."""
    model, steps, clock = arguments.model, arguments.steps, arguments.clock
    rates_of_input, input_cpu = input_rates(arguments, datasets.repeated)
    rounds = Rounds()
    for _ in range(arguments.repeats):
        rounds.compute_seconds.append(
            _timed_predict(model, datasets.in_memory, steps, clock, None)[0]
        )
        seconds, utilization, sm_activity = _timed_predict(
            model, datasets.repeated, steps, clock, arguments.utilization_probe
        )
        rounds.seconds.append(seconds)
        rounds.add_readings(utilization, sm_activity)
    return summarize(steps, rates_of_input, rounds, input_cpu)


def _report(
    arguments: DiagnosisArguments, batch_size: int, measured: Measurement, decision: Decision
) -> DiagnosisReport:
    """The report, with the advice that fits inference, the model and the pipeline."""
    model = arguments.model
    policy = getattr(model, "dtype_policy", None)
    return DiagnosisReport(
        batch_size=batch_size,
        steps=arguments.steps,
        repeats=arguments.repeats,
        input_batches_per_second=measured.input_rate,
        compute_batches_per_second=measured.compute_rate,
        fit_batches_per_second=measured.rate,
        input_bound_fraction=decision.fraction,
        verdict=decision.verdict,
        recommendations=cpu_advice(
            input_advice(
                inference_recommendations(
                    verdict=decision.verdict,
                    batch_size=batch_size,
                    input_rate=measured.input_rate,
                    compute_rate=measured.compute_rate,
                    predict_rate=measured.rate,
                    fraction=decision.fraction,
                    compute_dtype=str(getattr(policy, "compute_dtype", "float32")),
                    jit_compiled=bool(getattr(model, "jit_compile", False)),
                    steps_per_execution=int(getattr(model, "steps_per_execution", 1) or 1),
                    gpu_utilization=measured.gpu_utilization,
                    sm_activity=measured.sm_activity,
                    lint=decision.lint,
                    slowest_stage=decision.slowest_stage,
                    precision=arguments.precision,
                ),
                arguments.dataset,
                "predict",
            ),  # arrays' or a PyDataset's, not tf.data stages
            measured.input_cpu,
            decision.slowest_stage,
        ),
        gpu_utilization_percent=measured.gpu_utilization,
        thresholds=arguments.thresholds,
        sm_activity_percent=measured.sm_activity,
        mode=INFERENCE,
        input_cpu=measured.input_cpu,
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
