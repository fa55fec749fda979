"""What to change for a verdict, each change with the measurement behind it.

Pure rules, no TensorFlow. They take into account what the pipeline already does (its lint
and, when measured, its slowest stage) and what :func:`tfthroughput.recommend_precision` says
for the hardware at hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfthroughput.diagnosis.verdict import (
    BALANCED,
    COMPUTE_BOUND,
    INPUT_BOUND,
    LAUNCH_OVERHEAD_BOUND,
    DiagnosisThresholds,
    per,
    tiny_kernels,
)

# Lint rules that cost throughput (the others, like a cache after a shuffle, cost randomness).
SPEED_RULES = (
    "sequential-map",
    "sequential-file-reads",
    "sequential-generator",
    "per-example-work-after-batch",
    "deterministic-without-seed",
    "no-final-prefetch",
)


@dataclass(frozen=True)
class Recommendation:
    """One thing to change, and the measurement that says why.

    Attributes:
        action: What to use, naming the tfthroughput option or helper (for example
            ``"build_pipeline(num_parallel_calls=tf.data.AUTOTUNE)"``).
        reason: The measured reason, with numbers.
    """

    action: str
    reason: str

    def __str__(self) -> str:
        return f"{self.action}: {self.reason}"


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


def _input_recommendations(
    input_rate: float,
    compute_rate: float,
    fit_rate: float,
    fraction: float,
    lint: Any,
    slowest_stage: Any,
    *,
    step: str = "training step",
    call: str = "fit",
) -> list[Recommendation]:
    """The pipeline's advice; ``step`` and ``call`` name what it feeds (for inference,
    ``"predict step"`` and ``"predict"``)."""
    waits = f"{fraction:.0%} of each {call} step waits on input"
    if input_rate >= compute_rate:
        return _overlap_recommendations(input_rate, compute_rate, fit_rate, waits, lint, step, call)
    measured = (
        f"the input pipeline alone delivers {input_rate:,.1f} batches/s, "
        f"{compute_rate / input_rate:,.1f}x fewer than the {compute_rate:,.1f} batches/s the "
        f"{step} can take ({waits})"
    )
    if lint is None:
        return [
            Recommendation(
                "build_pipeline: parallel map (num_parallel_calls=tf.data.AUTOTUNE)",
                f"{measured}; a parallel map spreads the per-example work over all CPU cores.",
            ),
            Recommendation(
                "build_pipeline: cache (in memory or to a file)",
                f"{waits}: caching the deterministic preprocessing (before any random "
                "augmentation) pays its cost once instead of every epoch, if the preprocessed "
                "data fits in memory or on local disk.",
            ),
        ]
    recs = _pipeline_recommendations(lint, slowest_stage, measured)
    caches = any(stage.startswith("cache") for stage in lint.stages)
    if not caches:
        recs.append(
            Recommendation(
                "build_pipeline: cache (in memory or to a file)",
                f"{waits} and the pipeline has no cache: caching the deterministic "
                "preprocessing (before any random augmentation) pays its cost once instead of "
                "every epoch, if the preprocessed data fits in memory or on local disk.",
            )
        )
    return recs


def _overlap_recommendations(
    input_rate: float,
    compute_rate: float,
    fit_rate: float,
    waits: str,
    lint: Any,
    step: str,
    call: str,
) -> list[Recommendation]:
    """The input alone keeps up, yet the step waits: the two do not overlap, or they compete
    for the same CPU cores."""
    findings = [f for f in (lint.findings if lint else ()) if f.rule in SPEED_RULES]
    prefetch = [f for f in findings if f.rule == "no-final-prefetch"]
    measured = (
        f"the input pipeline alone delivers {input_rate:,.1f} batches/s, enough for the "
        f"{step}'s {compute_rate:,.1f}, yet {call} reaches only {fit_rate:,.1f} ({waits})"
    )
    if lint is None or prefetch:
        return [
            Recommendation(
                "build_pipeline: prefetch(tf.data.AUTOTUNE) as the last stage",
                f"{measured}: input and compute do not overlap; prefetch prepares the next "
                "batches while the step runs.",
            )
        ]
    return [
        Recommendation(
            "less CPU work per batch in the pipeline: build_pipeline(cache=True) for the "
            "deterministic part, or preprocess offline",
            f"{measured}, and the pipeline already overlaps with the step (it ends with a "
            f"prefetch): the pipeline's threads and the {step} compete for the same "
            f"CPU cores, so every CPU-second the pipeline saves goes to the {step}.",
        )
    ]


def _pipeline_recommendations(lint: Any, slowest_stage: Any, measured: str) -> list[Recommendation]:
    """The lint's findings that cost throughput, each naming its stage; without any, the
    slowest stage where it was measured."""
    findings = [f for f in lint.findings if f.rule in SPEED_RULES]
    # The measurement is quoted once, on the first finding; each names its own stage.
    recs = [
        Recommendation(
            finding.fix.rstrip("."),
            f"{finding.stage}: {finding.problem}" + (f" Measured: {measured}." if i == 0 else ""),
        )
        for i, finding in enumerate(findings)
    ]
    if not recs and slowest_stage is not None:
        recs.append(_slowest_stage_recommendation(slowest_stage, measured))
    elif not recs:
        recs.append(
            Recommendation(
                "a cheaper pipeline: less work per element, or more CPU cores for tf.data",
                f"{measured}; the pipeline already runs its stages in parallel and prefetches "
                "(no finding in lint_pipeline), so its work itself is the limit.",
            )
        )
    return recs


def _slowest_stage_recommendation(stage: Any, measured: str) -> Recommendation:
    where = "+".join(map(str, stage.positions)) or "(inner)"
    chose = ", ".join(f"{k}={v}" for k, v in stage.tuned)
    tuned = f"; AUTOTUNE runs it with {chose}" if chose else ""
    return Recommendation(
        f"make stage {where} ({stage.iterator}) cheaper: it is the slowest stage",
        f"{measured}; the pipeline already parallelises and prefetches, and stage {where} "
        f"({', '.join(stage.datasets)}) does {stage.share:.0%} of its work "
        f"({stage.busy_seconds:.3f} s of thread time){tuned}: simplify its function, cache "
        "its output if it is deterministic, or move the work offline.",
    )
