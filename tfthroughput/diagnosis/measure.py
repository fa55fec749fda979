"""Find the bottleneck of a Keras training run: input pipeline, compute, or per-step overhead."""

from __future__ import annotations

import contextlib
import math
import numbers
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import keras
import numpy as np
import tensorflow as tf

from tfthroughput._validation import check_positive_int
from tfthroughput.data.benchmark import _leading_dimension, benchmark_dataset
from tfthroughput.diagnosis._timing import _timed_fit
from tfthroughput.diagnosis.report import (
    BALANCED,
    COMPUTE_BOUND,
    INPUT_BOUND,
    LAUNCH_OVERHEAD_BOUND,
    DiagnosisReport,
    DiagnosisThresholds,
    Recommendation,
)
from tfthroughput.hardware.utilization import gpu_utilization

# Batches held in memory for the compute-only measurement (b). A few distinct batches are
# enough: the step's cost does not depend on the values, and memory stays small.
_CACHED_BATCHES = 4

UtilizationProbe = Callable[[], AbstractContextManager[Callable[[], "float | None"]]]


def diagnose(
    model: keras.Model,
    dataset: tf.data.Dataset,
    *,
    steps: int = 20,
    repeats: int = 3,
    thresholds: DiagnosisThresholds | None = None,
    utilization_probe: UtilizationProbe | None = gpu_utilization,
    clock: Callable[[], float] = time.perf_counter,
) -> DiagnosisReport:
    """Measure where a training run's time goes, and say what to change.

    Three measurements, each repeated ``repeats`` times after an untimed warm-up (tracing,
    XLA compilation, iterator creation, shuffle buffers, autotuning); the report keeps the
    median of the repeats, which one lucky or unlucky run on a shared machine cannot move:

    (a) the input pipeline alone: ``benchmark_dataset`` over ``steps + 1`` batches;
    (b) the training step alone: ``fit`` on a few batches taken from ``dataset`` and cached
        in memory, repeated (the compute-only limit; on a GPU it still pays the host-to-device
        copy every ``fit`` step pays);
    (c) both together: ``fit`` on ``dataset`` itself.

    ``(b)`` and ``(c)`` alternate, ``repeats`` rounds of each; every round is one ``fit`` of
    a warm-up epoch and a timed epoch of ``steps`` steps (Keras synchronises at each epoch
    end, and no batch hook is installed, so steps are dispatched as in normal training).
    The input-bound fraction is ``max(0, 1 - fit_rate / compute_rate)``: the share of the
    end-to-end step spent beyond the compute-only step, i.e. waiting on input. The verdict
    follows ``thresholds`` (see :class:`DiagnosisThresholds`).

    The model is trained during the measurements, so every variable of the model (weights,
    non-trainable state such as batch-norm statistics, random seed state), of its optimizer
    (slots, iteration count, loss scale) and of its metrics is copied first and written back
    afterwards, also when a measurement fails; ``model.history`` is put back too. A model
    that is not built yet is built by calling it on the first batch, and an optimizer that
    is not built is built on the model's trainable variables, as the first ``fit`` would do,
    so that their state exists to be restored.

    Args:
        model: A compiled Keras 3 model, trained as ``fit`` would train it.
        dataset: The ``tf.data.Dataset`` of batches ``fit`` would get (``(x, y)`` or
            ``(x, y, sample_weight)``). It is repeated as needed; it must yield at least one
            batch. For a model built in a ``tf.distribute`` strategy's scope its batches are
            global (split across the replicas), and so is the report's ``batch_size``.
        steps: Batches (a) or training steps (b, c) timed per repeat. Defaults to ``20``.
        repeats: Timed repeats of each measurement (the median is kept). Defaults to
            ``3``. ``diagnose`` runs ``4 * repeats * steps`` training steps in all.
        thresholds: Verdict thresholds. Defaults to ``None``: ``DiagnosisThresholds()``.
        utilization_probe: Measures GPU utilization during (c). A zero-argument callable
            returning a context manager. In each (c) round it is called and its context
            manager entered when the timed epoch begins, and exited when that ``fit``
            returns; the value its ``__enter__`` returned is then called with no argument and
            returns the mean GPU utilization of that span in percent (0..100), or ``None`` if
            it could not measure. The report carries the mean of the rounds' readings (``None``
            readings left out). Defaults to
            :func:`tfthroughput.hardware.utilization.gpu_utilization`:
            GPU-Util of every GPU this process uses, through NVML (``None`` on a machine
            without an NVIDIA GPU). ``None``: not measured.
        clock: Seconds-returning clock, injectable for tests. Defaults to
            ``time.perf_counter``.

    Returns:
        A frozen :class:`~tfthroughput.diagnosis.report.DiagnosisReport`. ``print(report)``
        shows it; ``report.to_markdown()`` and ``report.write_to_tensorboard(logdir)`` export it.

    Raises:
        TypeError: If ``model`` is not a Keras model, ``dataset`` not a ``tf.data.Dataset``,
            ``steps``/``repeats`` not ints, ``thresholds`` not a ``DiagnosisThresholds``,
            ``utilization_probe``/``clock`` not callable, or the probe's reading not a number.
        ValueError: If the model is not compiled, ``steps``/``repeats`` are not positive,
            the dataset yields nothing, or the probe's reading is outside 0..100.

    Example:
        >>> report = tfthroughput.diagnose(model, train_ds, steps=50)
        >>> print(report)            # table, verdict, recommendations
        >>> report.verdict
        'input-bound'
    """
    _check_model(model)
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"`dataset` must be a tf.data.Dataset. Received: dataset={dataset!r} "
            f"of type {type(dataset).__name__}"
        )
    check_positive_int("steps", steps)
    check_positive_int("repeats", repeats)
    if thresholds is None:
        thresholds = DiagnosisThresholds()
    elif not isinstance(thresholds, DiagnosisThresholds):
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

    first_batch = next(iter(dataset.take(1)), None)
    if first_batch is None:
        raise ValueError(f"`dataset` yielded no batch. Received: dataset={dataset!r}")
    batch_size = _leading_dimension(first_batch)
    repeated = dataset.repeat()
    in_memory = (
        dataset.take(min(_CACHED_BATCHES, steps)).cache().repeat().prefetch(tf.data.AUTOTUNE)
    )

    _build_state(model, first_batch)
    saved = _snapshot(model)
    try:
        # (a) Each benchmark creates a fresh iterator; the first run is the warm-up, and
        # batches_per_second excludes each run's first batch.
        input_rates = [
            benchmark_dataset(repeated, steps + 1, clock=clock).batches_per_second
            for _ in range(repeats + 1)
        ][1:]
        # (b) and (c) alternate, so that load from other processes hits both alike.
        compute_seconds: list[float] = []
        fit_seconds: list[float] = []
        utilizations: list[float] = []
        for _ in range(repeats):
            compute_seconds += _timed_fit(model, in_memory, steps=steps, repeats=1, clock=clock)
            seconds, utilization = _fit_round(model, repeated, steps, clock, utilization_probe)
            fit_seconds += seconds
            if utilization is not None:
                utilizations.append(utilization)
    finally:
        _restore(model, saved)

    gpu_utilization = sum(utilizations) / len(utilizations) if utilizations else None
    input_rate = statistics.median(input_rates)
    compute_rate = _rate(steps, statistics.median(compute_seconds))
    fit_rate = _rate(steps, statistics.median(fit_seconds))
    fraction = _input_bound_fraction(compute_rate, fit_rate)
    verdict = _verdict(fraction, _per(compute_rate), thresholds)
    recommendations = _recommendations(
        verdict=verdict,
        input_rate=input_rate,
        compute_rate=compute_rate,
        fit_rate=fit_rate,
        fraction=fraction,
        compute_dtype=_compute_dtype(model),
        jit_compiled=bool(getattr(model, "jit_compile", False)),
        gpu_utilization=gpu_utilization,
        thresholds=thresholds,
    )
    return DiagnosisReport(
        batch_size=batch_size,
        steps=steps,
        repeats=repeats,
        input_batches_per_second=input_rate,
        compute_batches_per_second=compute_rate,
        fit_batches_per_second=fit_rate,
        input_bound_fraction=fraction,
        verdict=verdict,
        recommendations=recommendations,
        gpu_utilization_percent=gpu_utilization,
        thresholds=thresholds,
    )


def _fit_round(
    model: keras.Model,
    dataset: tf.data.Dataset,
    steps: int,
    clock: Callable[[], float],
    utilization_probe: UtilizationProbe | None,
) -> tuple[list[float], float | None]:
    """One (c) measurement; the probe, if any, spans its timed epoch."""
    with contextlib.ExitStack() as stack:
        readings: list[Callable[[], float | None]] = []

        def on_measure_begin() -> None:
            readings.append(stack.enter_context(utilization_probe()))

        seconds = _timed_fit(
            model,
            dataset,
            steps=steps,
            repeats=1,
            clock=clock,
            on_measure_begin=None if utilization_probe is None else on_measure_begin,
        )
    return seconds, _check_utilization(readings[0]()) if readings else None


# ---------------------------------------------------------------------------- validation


def _check_model(model: object) -> None:
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"`model` must be a keras.Model. Received: model={model!r} "
            f"of type {type(model).__name__}"
        )
    if not getattr(model, "compiled", False) or model.optimizer is None:
        raise ValueError(
            "`model` must be compiled with an optimizer and a loss before it can be diagnosed: "
            f"call model.compile(...) first. Received: model={model.name!r}, not compiled"
        )


def _check_utilization(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            "`utilization_probe`'s reading must be a number of percent or None. "
            f"Received: {value!r}"
        )
    value = float(value)
    if not 0.0 <= value <= 100.0 or math.isnan(value):
        raise ValueError(
            f"`utilization_probe`'s reading must be between 0 and 100 percent. Received: {value}"
        )
    return value


# ------------------------------------------------------------------ state snapshot/restore


def _build_state(model: keras.Model, first_batch: object) -> None:
    """Create the variables the first ``fit`` would create, so they can be restored."""
    if not model.built:
        x, _, _ = keras.utils.unpack_x_y_sample_weight(first_batch)
        model(x)
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)


def _state_variables(model: keras.Model) -> list:
    seen: set[int] = set()
    variables = []
    for variable in [*model.variables, *model.optimizer.variables, *model.metrics_variables]:
        if id(variable) not in seen:
            seen.add(id(variable))
            variables.append(variable)
    return variables


def _snapshot(model: keras.Model) -> tuple[list, list[np.ndarray], object]:
    variables = _state_variables(model)
    values = [np.array(v.numpy(), copy=True) for v in variables]
    return variables, values, getattr(model, "history", None)


def _restore(model: keras.Model, saved: tuple[list, list[np.ndarray], object]) -> None:
    variables, values, history = saved
    for variable, value in zip(variables, values, strict=True):
        variable.assign(value)
    model.history = history


# ------------------------------------------------------------------------- the numbers


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def _per(rate: float) -> float:
    return 1.0 / rate if rate > 0 else float("inf")


def _input_bound_fraction(compute_rate: float, fit_rate: float) -> float:
    """Share of the fit step beyond the compute-only step: ``(t_fit - t_compute) / t_fit``."""
    if not compute_rate > 0 or math.isinf(compute_rate):
        return 0.0
    return min(1.0, max(0.0, 1.0 - fit_rate / compute_rate))


def _verdict(fraction: float, compute_step_seconds: float, thresholds: DiagnosisThresholds) -> str:
    if fraction >= thresholds.input_bound_fraction:
        return INPUT_BOUND
    if compute_step_seconds < thresholds.launch_overhead_step_seconds:
        return LAUNCH_OVERHEAD_BOUND
    if fraction <= thresholds.compute_bound_fraction:
        return COMPUTE_BOUND
    return BALANCED


def _compute_dtype(model: keras.Model) -> str:
    policy = getattr(model, "dtype_policy", None)
    return str(getattr(policy, "compute_dtype", "float32"))


def _recommendations(
    *,
    verdict: str,
    input_rate: float,
    compute_rate: float,
    fit_rate: float,
    fraction: float,
    compute_dtype: str,
    jit_compiled: bool,
    gpu_utilization: float | None,
    thresholds: DiagnosisThresholds,
) -> tuple[Recommendation, ...]:
    """Concrete changes for a verdict, each with the measurement behind it."""
    recs: list[Recommendation] = []
    waits = f"{fraction:.0%} of each fit step waits on input"
    if verdict in (INPUT_BOUND, BALANCED):
        if input_rate < compute_rate:
            recs.append(
                Recommendation(
                    "build_pipeline: parallel map (num_parallel_calls=tf.data.AUTOTUNE)",
                    f"the input pipeline alone delivers {input_rate:,.1f} batches/s, "
                    f"{compute_rate / input_rate:,.1f}x fewer than the {compute_rate:,.1f} "
                    f"batches/s the training step can take ({waits}); a parallel map spreads "
                    "the per-example work over all CPU cores.",
                )
            )
            recs.append(
                Recommendation(
                    "build_pipeline: cache (in memory or to a file)",
                    f"{waits}: caching the deterministic preprocessing (before any random "
                    "augmentation) pays its cost once instead of every epoch, if the "
                    "preprocessed data fits in memory or on local disk.",
                )
            )
        else:
            recs.append(
                Recommendation(
                    "build_pipeline: prefetch(tf.data.AUTOTUNE) as the last stage",
                    f"the input pipeline alone delivers {input_rate:,.1f} batches/s, enough "
                    f"for the training step's {compute_rate:,.1f}, yet fit reaches only "
                    f"{fit_rate:,.1f} ({waits}): input and compute do not overlap; prefetch "
                    "prepares the next batches while the step runs (on a CPU-only machine "
                    "they also share the same cores).",
                )
            )
    step_ms = _per(compute_rate) * 1000
    if verdict == LAUNCH_OVERHEAD_BOUND:
        recs.append(
            Recommendation(
                "a larger batch: find_batch_size",
                f"a compute-only step takes {step_ms:.2f} ms, under the "
                f"{thresholds.launch_overhead_step_seconds * 1000:.1f} ms where fixed per-step "
                "costs dominate; a larger batch does more work per step at almost the same "
                "fixed cost, and find_batch_size measures the examples/s curve up to the "
                "largest batch that fits.",
            )
        )
        recs.append(
            Recommendation(
                "model.compile(..., steps_per_execution=N)",
                f"with {step_ms:.2f} ms steps, running N steps per call (a Keras built-in) "
                "divides the per-step Python and dispatch cost by N.",
            )
        )
        if not jit_compiled:
            recs.append(
                Recommendation(
                    "XLA: model.compile(..., jit_compile=True)",
                    f"the {step_ms:.2f} ms step is not XLA-compiled; XLA fuses its many small "
                    "kernels into fewer launches.",
                )
            )
    if verdict in (COMPUTE_BOUND, BALANCED):
        share = f"fit reaches {min(fit_rate / compute_rate, 1.0):.0%} of the compute-only limit"
        if compute_dtype == "float32":
            recs.append(
                Recommendation(
                    'mixed_precision("auto")',
                    f"the training step is the limit ({compute_rate:,.1f} batches/s alone, "
                    f"{share}) and the model computes in float32; mixed_float16 (GPUs with "
                    "compute capability 7.0+) or mixed_bfloat16 (Ampere+, TPUs, CPUs with "
                    "bf16) halves activation memory traffic and uses the faster units.",
                )
            )
        if not jit_compiled:
            recs.append(
                Recommendation(
                    "XLA: model.compile(..., jit_compile=True)",
                    f"the {step_ms:.2f} ms training step is not XLA-compiled "
                    "(model.jit_compile is False); XLA fuses element-wise operations and "
                    "cuts memory traffic.",
                )
            )
        if gpu_utilization is not None and gpu_utilization < 80.0:
            reason = (
                f"the GPU was busy only {gpu_utilization:.0f}% of the time during fit although "
                "the input keeps up: the step's kernels are too small to fill it"
            )
        else:
            reason = f"the training step is the limit ({share})"
        recs.append(
            Recommendation(
                "a larger batch: find_batch_size",
                f"{reason}; a larger batch usually raises examples/s until memory runs out, "
                "and find_batch_size measures the curve and the largest batch that fits.",
            )
        )
    return tuple(recs)
