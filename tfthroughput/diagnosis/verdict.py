"""From diagnose's measurements to a verdict and what to change.

Pure rules, no TensorFlow: the thresholds that separate the verdicts, the verdict itself, and
the recommendations, which take into account what the pipeline already does (its lint and,
when measured, its slowest stage) and what :func:`tfthroughput.recommend_precision` says for
the hardware at hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tfthroughput.hardware.activity import overstates_work

INPUT_BOUND = "input-bound"
COMPUTE_BOUND = "compute-bound"
BALANCED = "balanced"
LAUNCH_OVERHEAD_BOUND = "launch-overhead-bound"

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
class DiagnosisThresholds:
    """Where one verdict ends and the next begins.

    The verdict is decided in this order, on the measured input-bound fraction ``f`` and the
    compute-only step time ``t``:

    1. ``f >= input_bound_fraction``: ``"input-bound"``.
    2. ``t < launch_overhead_step_seconds``, or GPU-Util above 20 % and at least twice SM
       activity (where SM activity was measured: tiny kernels): ``"launch-overhead-bound"``.
    3. ``f <= compute_bound_fraction``: ``"compute-bound"``.
    4. otherwise: ``"balanced"``.

    Attributes:
        input_bound_fraction: Defaults to ``0.25``: a quarter of every step spent waiting on
            input, i.e. fixing the input would make training at least 1.33x faster.
        compute_bound_fraction: Defaults to ``0.15``: at or below this, fixing the input would
            gain under 1.18x, and the fraction is within run-to-run noise on a loaded shared
            machine (up to 0.14 measured for a compute-heavy model on in-memory data, 2 CPU
            cores shared with other jobs).
        launch_overhead_step_seconds: Defaults to ``0.002`` (2 ms). A Keras ``fit`` step has a
            fixed host cost of about 1 ms (0.9 ms measured for a two-layer Dense model on CPU),
            so a compute-only step shorter than this is mostly fixed cost.

    Raises:
        TypeError: If a threshold is not a number.
        ValueError: If a fraction is outside ``[0, 1]``, ``compute_bound_fraction`` is not
            below ``input_bound_fraction``, or ``launch_overhead_step_seconds`` is negative.
    """

    input_bound_fraction: float = 0.25
    compute_bound_fraction: float = 0.15
    launch_overhead_step_seconds: float = 0.002

    def __post_init__(self) -> None:
        for name in ("input_bound_fraction", "compute_bound_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"`{name}` must be a number. Received: {name}={value!r}")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"`{name}` must be between 0 and 1. Received: {name}={value}")
        if self.compute_bound_fraction >= self.input_bound_fraction:
            raise ValueError(
                "`compute_bound_fraction` must be below `input_bound_fraction`. Received: "
                f"compute_bound_fraction={self.compute_bound_fraction}, "
                f"input_bound_fraction={self.input_bound_fraction}"
            )
        value = self.launch_overhead_step_seconds
        expected = (
            "`launch_overhead_step_seconds` must be a non-negative number of seconds. "
            f"Received: launch_overhead_step_seconds={value!r}"
        )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(expected)
        if value < 0:
            raise ValueError(expected)


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


def per(rate: float) -> float:
    """Seconds per item at ``rate`` items per second."""
    return 1.0 / rate if rate > 0 else float("inf")


def input_bound_fraction(compute_rate: float, fit_rate: float) -> float:
    """Share of the fit step beyond the compute-only step: ``(t_fit - t_compute) / t_fit``."""
    if not compute_rate > 0 or math.isinf(compute_rate):
        return 0.0
    return min(1.0, max(0.0, 1.0 - fit_rate / compute_rate))


def verdict(
    fraction: float,
    compute_step_seconds: float,
    thresholds: DiagnosisThresholds,
    *,
    gpu_utilization: float | None = None,
    sm_activity: float | None = None,
) -> str:
    """The verdict for an input-bound fraction and a compute-only step time, and GPU-Util
    against SM activity where both were measured."""
    if fraction >= thresholds.input_bound_fraction:
        return INPUT_BOUND
    if compute_step_seconds < thresholds.launch_overhead_step_seconds or tiny_kernels(
        gpu_utilization, sm_activity
    ):
        return LAUNCH_OVERHEAD_BOUND
    if fraction <= thresholds.compute_bound_fraction:
        return COMPUTE_BOUND
    return BALANCED


def tiny_kernels(gpu_utilization: float | None, sm_activity: float | None) -> bool:
    """GPU-Util far above SM activity: kernels ran, but too small to fill the GPU."""
    return (
        gpu_utilization is not None
        and sm_activity is not None
        and overstates_work(gpu_utilization, sm_activity)
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
        precision: The :class:`~tfthroughput.PrecisionRecommendation` for the hardware at
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
        # Tiny kernels (GPU-Util far above SM activity) or tiny steps: both are fixed costs.
        tiny = tiny_kernels(gpu_utilization, sm_activity)
        evidence = (
            f"GPU-Util was {gpu_utilization:.1f}% during fit but SM activity only "
            f"{sm_activity:.1f}%: kernels were running, yet each kept few SMs busy"
            if tiny
            else f"a compute-only step takes {step_ms:.2f} ms, under the "
            f"{thresholds.launch_overhead_step_seconds * 1000:.1f} ms where fixed per-step "
            "costs dominate"
        )
        recs.append(
            Recommendation(
                "a larger batch: find_batch_size",
                f"{evidence}; a larger batch does more work per step and per kernel at almost "
                "the same fixed cost, and find_batch_size measures the examples/s curve up to "
                "the largest batch that fits.",
            )
        )
        recs.append(
            Recommendation(
                "model.compile(..., steps_per_execution=N)",
                f"with {step_ms:.2f} ms steps, running N steps per call (a Keras built-in) "
                "divides the per-step Python and dispatch cost by N.",
            )
        )
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
            recs.append(
                Recommendation(
                    "fewer, larger ops in the model",
                    f"{evidence}; every op is at least one kernel launch: vectorise loops over "
                    "examples or features, merge many narrow layers into fewer wide ones, and "
                    "keep Python-side work (py_function, per-step NumPy) out of the step.",
                )
            )
            if (
                compute_dtype == "float32"
                and precision is not None
                and precision.policy != "float32"
            ):
                recs.append(
                    Recommendation(
                        'mixed_precision("auto")',
                        f"{evidence}, in float32; {precision.policy} halves the bytes each "
                        "kernel moves, runs matmuls on the tensor cores, and leaves memory for "
                        f"the larger batch (recommend_precision: {precision.policy_reason}).",
                    )
                )
    if verdict in (COMPUTE_BOUND, BALANCED):
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
    return tuple(recs)


def _input_recommendations(
    input_rate: float,
    compute_rate: float,
    fit_rate: float,
    fraction: float,
    lint: Any,
    slowest_stage: Any,
) -> list[Recommendation]:
    waits = f"{fraction:.0%} of each fit step waits on input"
    findings = [f for f in (lint.findings if lint else ()) if f.rule in SPEED_RULES]
    if input_rate >= compute_rate:
        prefetch = [f for f in findings if f.rule == "no-final-prefetch"]
        measured = (
            f"the input pipeline alone delivers {input_rate:,.1f} batches/s, enough for the "
            f"training step's {compute_rate:,.1f}, yet fit reaches only {fit_rate:,.1f} ({waits})"
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
                "prefetch): the pipeline's threads and the training step compete for the same "
                "CPU cores, so every CPU-second the pipeline saves goes to training.",
            )
        ]
    measured = (
        f"the input pipeline alone delivers {input_rate:,.1f} batches/s, "
        f"{compute_rate / input_rate:,.1f}x fewer than the {compute_rate:,.1f} batches/s the "
        f"training step can take ({waits})"
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
