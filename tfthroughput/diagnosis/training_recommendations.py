"""What to change for a training verdict, each change with the measurement behind it.

Pure rules, no TensorFlow. They take into account what the pipeline already does (its lint
and, when measured, its slowest stage: :mod:`~tfthroughput.diagnosis.recommendations`) and what
:func:`tfthroughput.recommend_precision` says for the hardware at hand.
"""

from __future__ import annotations

from typing import Any

from tfthroughput.diagnosis.recommendations import Recommendation, _input_recommendations
from tfthroughput.diagnosis.verdict import (
    BALANCED,
    COMPUTE_BOUND,
    INPUT_BOUND,
    LAUNCH_OVERHEAD_BOUND,
    DiagnosisThresholds,
    per,
    tiny_kernels,
)


def recommendations(
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
    lint: Any = None,
    slowest_stage: Any = None,
    precision: Any = None,
    sm_activity: float | None = None,
) -> tuple[Recommendation, ...]:
    """Concrete changes for a verdict, each with the measurement behind it.

    Args:
        lint: The :class:`~tfthroughput.data.lint.PipelineLint` of the dataset, or ``None``
            when it could not be read: then nothing is assumed about the pipeline.
        slowest_stage: The :class:`~tfthroughput.data.autotune.StageMeasurement` with the
            largest share of the pipeline's work, or ``None`` when not measured.
        precision: The :class:`~tfthroughput.precision.PrecisionRecommendation` for the hardware at
            hand; mixed precision and XLA are advised only where it advises them. ``None``:
            neither is advised.
        sm_activity: Mean GPM SM activity during fit, where measured: far below
            ``gpu_utilization``, the launch-overhead advice quotes both and adds fewer, larger
            ops and mixed precision.
        (the other arguments are diagnose's measurements.)
    """
    recs: list[Recommendation] = []
    if verdict in (INPUT_BOUND, BALANCED):
        recs += _input_recommendations(
            input_rate, compute_rate, fit_rate, fraction, lint, slowest_stage
        )
    step_ms = per(compute_rate) * 1000
    xla = precision is not None and precision.xla and not jit_compiled
    if verdict == LAUNCH_OVERHEAD_BOUND:
        recs += _launch_overhead_recommendations(
            step_ms, compute_dtype, xla, gpu_utilization, sm_activity, thresholds, precision
        )
    if verdict in (COMPUTE_BOUND, BALANCED):
        recs += _compute_recommendations(
            compute_rate, fit_rate, step_ms, compute_dtype, xla, gpu_utilization, precision
        )
    return tuple(recs)


def _launch_overhead_recommendations(
    step_ms: float,
    compute_dtype: str,
    xla: bool,
    gpu_utilization: float | None,
    sm_activity: float | None,
    thresholds: DiagnosisThresholds,
    precision: Any,
) -> list[Recommendation]:
    """Tiny kernels (GPU-Util far above SM activity) or tiny steps: both are fixed costs."""
    tiny = tiny_kernels(gpu_utilization, sm_activity)
    evidence = (
        f"GPU-Util was {gpu_utilization:.1f}% during fit but SM activity only "
        f"{sm_activity:.1f}%: kernels were running, yet each kept few SMs busy"
        if tiny
        else f"a compute-only step takes {step_ms:.2f} ms, under the "
        f"{thresholds.launch_overhead_step_seconds * 1000:.1f} ms where fixed per-step "
        "costs dominate"
    )
    recs = [
        Recommendation(
            "a larger batch: find_batch_size",
            f"{evidence}; a larger batch does more work per step and per kernel at almost "
            "the same fixed cost, and find_batch_size measures the examples/s curve up to "
            "the largest batch that fits.",
        ),
        Recommendation(
            "model.compile(..., steps_per_execution=N)",
            f"with {step_ms:.2f} ms steps, running N steps per call (a Keras built-in) "
            "divides the per-step Python and dispatch cost by N.",
        ),
    ]
    if xla:
        fuses = (
            f"{evidence}; XLA fuses the step's many small kernels into fewer, larger ones"
            if tiny
            else f"the {step_ms:.2f} ms step is not XLA-compiled; XLA fuses its many small "
            "kernels into fewer launches"
        )
        recs.append(
            Recommendation(
                "XLA: model.compile(..., jit_compile=True)",
                f"{fuses} (recommend_precision: {precision.xla_reason}).",
            )
        )
    if tiny:
        recs += _tiny_kernel_recommendations(evidence, compute_dtype, precision)
    return recs


def _tiny_kernel_recommendations(
    evidence: str, compute_dtype: str, precision: Any
) -> list[Recommendation]:
    """Fewer launches in the model itself, and half the bytes per kernel for float32."""
    recs = [
        Recommendation(
            "fewer, larger ops in the model",
            f"{evidence}; every op is at least one kernel launch: vectorise loops over "
            "examples or features, merge many narrow layers into fewer wide ones, and "
            "keep Python-side work (py_function, per-step NumPy) out of the step.",
        )
    ]
    if compute_dtype == "float32" and precision is not None and precision.policy != "float32":
        recs.append(
            Recommendation(
                'mixed_precision("auto")',
                f"{evidence}, in float32; {precision.policy} halves the bytes each "
                "kernel moves, runs matmuls on the tensor cores, and leaves memory for "
                f"the larger batch (recommend_precision: {precision.policy_reason}).",
            )
        )
    return recs


def _compute_recommendations(
    compute_rate: float,
    fit_rate: float,
    step_ms: float,
    compute_dtype: str,
    xla: bool,
    gpu_utilization: float | None,
    precision: Any,
) -> list[Recommendation]:
    """The training step is (part of) the limit: cheaper arithmetic, fused kernels, more work
    per step."""
    recs = []
    share = f"fit reaches {min(fit_rate / compute_rate, 1.0):.0%} of the compute-only limit"
    if compute_dtype == "float32" and precision is not None and precision.policy != "float32":
        recs.append(
            Recommendation(
                'mixed_precision("auto")',
                f"the training step is the limit ({compute_rate:,.1f} batches/s alone, "
                f"{share}) and the model computes in float32; recommend_precision() "
                f"advises {precision.policy} here ({precision.policy_reason}).",
            )
        )
    if xla:
        recs.append(
            Recommendation(
                "XLA: model.compile(..., jit_compile=True)",
                f"the {step_ms:.2f} ms training step is not XLA-compiled "
                "(model.jit_compile is False); XLA fuses element-wise operations and "
                f"cuts memory traffic (recommend_precision: {precision.xla_reason}).",
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
    return recs
