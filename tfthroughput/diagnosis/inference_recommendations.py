"""What to change for an inference verdict, each change with the measurement behind it.

Pure rules, no TensorFlow. Inference differs from training in what it can afford: with no
gradients, activations kept for the backward pass or optimizer slots, a batch several times the
training batch fits in the same memory, and the batch size changes no result, so it is the
first lever for throughput; ``steps_per_execution`` applies to ``predict`` too; mixed precision
needs no loss scaling.
"""

from __future__ import annotations

from typing import Any

from tfthroughput.diagnosis.recommendations import Recommendation, _input_recommendations
from tfthroughput.diagnosis.verdict import (
    BALANCED,
    COMPUTE_BOUND,
    INPUT_BOUND,
    LAUNCH_OVERHEAD_BOUND,
    per,
    tiny_kernels,
)


def inference_recommendations(
    *,
    verdict: str,
    batch_size: int,
    input_rate: float,
    compute_rate: float,
    predict_rate: float,
    fraction: float,
    compute_dtype: str,
    jit_compiled: bool,
    steps_per_execution: int,
    gpu_utilization: float | None,
    sm_activity: float | None = None,
    lint: Any = None,
    slowest_stage: Any = None,
    precision: Any = None,
) -> tuple[Recommendation, ...]:
    """Concrete changes for an inference verdict (see :func:`diagnose_inference`).

    Args:
        verdict: The verdict.
        batch_size: Examples per batch measured.
        input_rate, compute_rate, predict_rate: Batches/s of the input alone, the predict
            step alone, and ``predict`` on the dataset.
        fraction: The input-bound fraction.
        compute_dtype: The model's compute dtype.
        jit_compiled: Whether the model is XLA-compiled already.
        steps_per_execution: The model's ``steps_per_execution``.
        gpu_utilization, sm_activity: Means during the ``predict`` measurement, where read.
        lint, slowest_stage: What is known of the pipeline (as for training).
        precision: The :class:`~tfthroughput.PrecisionRecommendation` for this hardware, or
            ``None``: then neither mixed precision nor XLA is advised.

    Returns:
        The recommendations, most important first.
    """
    recs: list[Recommendation] = []
    if verdict in (INPUT_BOUND, BALANCED):
        recs += _input_recommendations(
            input_rate,
            compute_rate,
            predict_rate,
            fraction,
            lint,
            slowest_stage,
            step="predict step",
            call="predict",
        )
    step_ms = per(compute_rate) * 1000
    if verdict in (LAUNCH_OVERHEAD_BOUND, COMPUTE_BOUND, BALANCED):
        recs.append(_larger_batch(batch_size, step_ms, gpu_utilization, sm_activity))
    if verdict == LAUNCH_OVERHEAD_BOUND and steps_per_execution == 1:
        recs.append(
            Recommendation(
                "model.compile(..., steps_per_execution=N)",
                f"with {step_ms:.2f} ms predict steps, running N batches per call (predict "
                "honours it as fit does) divides the per-batch Python and dispatch cost by N.",
            )
        )
    if verdict != INPUT_BOUND and precision is not None:
        recs += _precision_recommendations(step_ms, compute_dtype, jit_compiled, precision)
    return tuple(recs)


def _larger_batch(
    batch_size: int, step_ms: float, gpu_utilization: float | None, sm_activity: float | None
) -> Recommendation:
    """Inference's first lever: a batch several times the training batch fits and changes
    no result."""
    tiny = tiny_kernels(gpu_utilization, sm_activity)
    why = (
        f"GPU-Util was {gpu_utilization:.1f}% but SM activity only {sm_activity:.1f}%: "
        "each kernel kept few SMs busy"
        if tiny
        else f"a predict step on {batch_size} examples takes {step_ms:.2f} ms"
    )
    return Recommendation(
        f"a larger batch: model.predict(..., batch_size={batch_size * 4}) or more",
        f"{why}; inference keeps no gradients, activations for a backward pass or "
        "optimizer slots, so a batch several times the training batch fits in the same "
        "memory and changes no result, while each step's fixed cost is paid once per "
        "batch: examples/s rises until the GPU is full.",
    )


def _precision_recommendations(
    step_ms: float, compute_dtype: str, jit_compiled: bool, precision: Any
) -> list[Recommendation]:
    """XLA and mixed precision, where ``recommend_precision`` advises them here."""
    recs = []
    if precision.xla and not jit_compiled:
        recs.append(
            Recommendation(
                "XLA: model.compile(..., jit_compile=True)",
                f"the {step_ms:.2f} ms predict step is not XLA-compiled; XLA fuses its "
                "many small kernels into fewer launches and cuts memory traffic "
                f"(recommend_precision: {precision.xla_reason}).",
            )
        )
    if compute_dtype == "float32" and precision.policy != "float32":
        recs.append(
            Recommendation(
                'mixed_precision("auto")',
                f"the model predicts in float32; {precision.policy} halves the bytes each "
                "kernel moves and runs matmuls on the tensor cores, and inference needs "
                f"no loss scaling (recommend_precision: {precision.policy_reason}).",
            )
        )
    return recs
