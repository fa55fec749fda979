"""What to change for a verdict, each change with the measurement behind it: the
:class:`Recommendation` type, and the input pipeline's advice both modes share.

Pure rules, no TensorFlow. They take into account what the pipeline already does (its lint
and, when measured, its slowest stage). The rest of the advice is per mode:
:mod:`~tfthroughput.diagnosis.training_recommendations` and
:mod:`~tfthroughput.diagnosis.inference_recommendations`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Lint rules that cost throughput (the others, like a cache after a shuffle, cost randomness).
SPEED_RULES = (
    "sequential-map",
    "sequential-file-reads",
    "sequential-generator",
    "per-example-work-after-batch",
    "deterministic-without-seed",
    "no-final-prefetch",
)


# How the slowest-stage recommendation's action begins (other rules find it by it).
SLOWEST_STAGE_ACTION = "make stage"


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
        f"{SLOWEST_STAGE_ACTION} {where} ({stage.iterator}) cheaper: it is the slowest stage",
        f"{measured}; the pipeline already parallelises and prefetches, and stage {where} "
        f"({', '.join(stage.datasets)}) does {stage.share:.0%} of its work "
        f"({stage.busy_seconds:.3f} s of thread time){tuned}: simplify its function, cache "
        "its output if it is deterministic, or move the work offline.",
    )


def replace_pipeline_advice(
    advice: Sequence[Recommendation], replacement: Callable[[str], Recommendation]
) -> list[Recommendation]:
    """``advice`` with its ``build_pipeline`` items replaced, where the first of them stood, by
    ``replacement(first_reason)``: the advice for an input that is not a tf.data pipeline."""
    pipeline = [rec for rec in advice if rec.action.startswith("build_pipeline")]
    if not pipeline:
        return list(advice)
    first = list(advice).index(pipeline[0])
    rest = [rec for rec in advice if rec not in pipeline]
    return [*rest[:first], replacement(pipeline[0].reason), *rest[first:]]
