"""The verdict rules, thresholds and recommendations: what the pipeline already does and what
recommend_precision says for the hardware decide what is recommended."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfthroughput
from tfthroughput import build_pipeline, lint_pipeline
from tfthroughput.data.autotune import StageMeasurement
from tfthroughput.diagnosis.training_recommendations import recommendations
from tfthroughput.diagnosis.verdict import (
    BALANCED,
    COMPUTE_BOUND,
    INPUT_BOUND,
    LAUNCH_OVERHEAD_BOUND,
    DiagnosisThresholds,
    input_bound_fraction,
    verdict,
)
from tfthroughput.precision import DeviceDescription

CPU_WITHOUT_BF16 = tfthroughput.recommend_precision(
    [DeviceDescription("CPU", "x86", None, {"avx2"})]
)
AMPERE = tfthroughput.recommend_precision([DeviceDescription("GPU", "A100", (8, 0))])


def test_input_bound_fraction_formula():
    assert input_bound_fraction(100.0, 25.0) == 0.75
    assert input_bound_fraction(100.0, 100.0) == 0.0
    assert input_bound_fraction(100.0, 120.0) == 0.0  # noise: fit faster than compute
    assert input_bound_fraction(float("inf"), 10.0) == 0.0


@pytest.mark.parametrize(
    "fraction, step_seconds, expected",
    [
        (0.25, 0.010, INPUT_BOUND),
        (0.90, 0.0001, INPUT_BOUND),  # input first, even for tiny steps
        (0.24, 0.001, LAUNCH_OVERHEAD_BOUND),
        (0.0, 0.0019, LAUNCH_OVERHEAD_BOUND),
        (0.15, 0.002, COMPUTE_BOUND),
        (0.0, 0.5, COMPUTE_BOUND),
        (0.16, 0.010, BALANCED),
        (0.2499, 0.010, BALANCED),
    ],
)
def test_verdict_rules_with_default_thresholds(fraction, step_seconds, expected):
    assert verdict(fraction, step_seconds, DiagnosisThresholds()) == expected


# GPU-Util and SM activity of bf16 matmul loops on an H200: 64x64 (tiny kernels), 1024x1024,
# 8192x8192.
H200_ROWS = [(23.6, 0.5), (47.8, 27.5), (95.5, 92.5)]


@pytest.mark.parametrize(
    ("fraction", "utilization", "sm_activity", "expected"),
    [
        (0.0, *H200_ROWS[0], LAUNCH_OVERHEAD_BOUND),
        (0.0, *H200_ROWS[1], COMPUTE_BOUND),
        (0.0, *H200_ROWS[2], COMPUTE_BOUND),
        (0.5, *H200_ROWS[0], INPUT_BOUND),  # input first: its GPU idles whatever the kernels
        (0.0, 23.6, None, COMPUTE_BOUND),  # no GPM: GPU-Util alone proves nothing
    ],
)
def test_verdict_uses_sm_activity_when_measured(fraction, utilization, sm_activity, expected):
    measured = {"gpu_utilization": utilization, "sm_activity": sm_activity}
    assert verdict(fraction, 0.5, DiagnosisThresholds(), **measured) == expected


def test_thresholds_are_overridable():
    strict = DiagnosisThresholds(
        input_bound_fraction=0.5, compute_bound_fraction=0.3, launch_overhead_step_seconds=0.0
    )
    assert verdict(0.4, 0.001, strict) == BALANCED
    assert verdict(0.3, 0.001, strict) == COMPUTE_BOUND


def _recs(**overrides):
    arguments = dict(
        verdict=COMPUTE_BOUND,
        input_rate=1000.0,
        compute_rate=50.0,
        fit_rate=50.0,
        fraction=0.0,
        compute_dtype="float32",
        jit_compiled=False,
        gpu_utilization=None,
        thresholds=DiagnosisThresholds(),
        precision=AMPERE,
    )
    arguments.update(overrides)
    return recommendations(**arguments)


def _actions(recs):
    return [r.action for r in recs]


def test_compute_advice_agrees_with_recommend_precision():
    # On an Ampere GPU: bfloat16 and XLA, both as recommend_precision says.
    recs = _recs()
    assert _actions(recs) == [
        'mixed_precision("auto")',
        "XLA: model.compile(..., jit_compile=True)",
        "a larger batch: find_batch_size",
    ]
    assert "recommend_precision() advises mixed_bfloat16 here" in recs[0].reason
    # On a CPU without bfloat16 instructions recommend_precision says float32 and no XLA, so
    # neither is advised, for a compute-bound model or for tiny steps.
    assert CPU_WITHOUT_BF16.policy == "float32" and CPU_WITHOUT_BF16.xla is False
    assert _actions(_recs(precision=CPU_WITHOUT_BF16)) == ["a larger batch: find_batch_size"]
    tiny = _recs(
        verdict=LAUNCH_OVERHEAD_BOUND,
        compute_rate=1000.0,
        fit_rate=1000.0,
        precision=CPU_WITHOUT_BF16,
    )
    assert _actions(tiny) == [
        "a larger batch: find_batch_size",
        "model.compile(..., steps_per_execution=N)",
    ]
    assert "takes 1.00 ms, under the 2.0 ms" in tiny[0].reason
    # Already mixed precision and XLA: only the batch size remains; low GPU use is quoted.
    recs = _recs(compute_dtype="bfloat16", jit_compiled=True, gpu_utilization=35.0)
    assert _actions(recs) == ["a larger batch: find_batch_size"]
    assert "busy only 35% of the time" in recs[0].reason


def test_input_advice_without_a_readable_pipeline():
    recs = _recs(verdict=INPUT_BOUND, input_rate=80.0, fit_rate=20.0, fraction=0.6)
    assert _actions(recs) == ["build_pipeline: prefetch(tf.data.AUTOTUNE) as the last stage"]
    assert "delivers 80.0 batches/s, enough for the training step's 50.0" in recs[0].reason
    recs = _recs(verdict=BALANCED, input_rate=40.0, fit_rate=40.0, fraction=0.2)
    assert _actions(recs)[:2] == [
        "build_pipeline: parallel map (num_parallel_calls=tf.data.AUTOTUNE)",
        "build_pipeline: cache (in memory or to a file)",
    ]


def _slow(x):
    return tf.ensure_shape(tf.py_function(lambda v: v, [x], tf.float32), [])


def test_input_advice_names_the_lint_findings_of_the_pipeline():
    dataset = tf.data.Dataset.from_tensor_slices(np.zeros(64, np.float32)).map(_slow).batch(8)
    recs = _recs(
        verdict=INPUT_BOUND,
        input_rate=10.0,
        fit_rate=9.0,
        fraction=0.8,
        lint=lint_pipeline(dataset),
    )
    assert _actions(recs) == [
        "map(..., num_parallel_calls=tf.data.AUTOTUNE), or pass the function to build_pipeline "
        "as preprocess_fn (deterministic work) or augment_fn (random work)",
        # map + batch run fused as one asynchronous stage, after which tf.data adds no prefetch
        "end with .prefetch(tf.data.AUTOTUNE) (build_pipeline always does)",
        "build_pipeline: cache (in memory or to a file)",
    ]
    assert recs[0].reason.startswith("stage 2: map(slow) (MapDataset): this per-example map")
    assert (
        "Measured: the input pipeline alone delivers 10.0 batches/s, 5.0x fewer" in recs[0].reason
    )


def test_input_advice_for_a_pipeline_that_already_parallelises_caches_and_prefetches():
    built = build_pipeline(
        np.zeros(64, np.float32), preprocess_fn=_slow, cache=True, augment_fn=_slow, batch_size=8
    )
    lint = lint_pipeline(built)
    assert lint.findings == ()
    slowest = StageMeasurement(
        iterator="ParallelMapV2",
        path="Root::Prefetch::ParallelBatch::ParallelMapV2",
        datasets=("ParallelMapDatasetV2:7",),
        positions=(4,),
        tuned=(("parallelism", 2),),
        tuned_range=(("parallelism", 1, 2),),
        fixed=(("deterministic", "false"),),
        calls=40,
        busy_seconds=0.5,
        wait_seconds=0.1,
        share=0.9,
    )
    recs = _recs(
        verdict=INPUT_BOUND,
        input_rate=10.0,
        fit_rate=9.0,
        fraction=0.8,
        lint=lint,
        slowest_stage=slowest,
    )
    actions = _actions(recs)
    assert actions == ["make stage 4 (ParallelMapV2) cheaper: it is the slowest stage"]
    assert not any("parallel map" in a or "cache" in a or "prefetch" in a for a in actions)
    assert "does 90% of its work" in recs[0].reason
    assert "AUTOTUNE runs it with parallelism=2" in recs[0].reason
    # Fast enough alone but slower in fit, while it already prefetches: contention, not prefetch.
    recs = _recs(verdict=INPUT_BOUND, input_rate=80.0, fit_rate=20.0, fraction=0.6, lint=lint)
    assert _actions(recs)[0].startswith("less CPU work per batch in the pipeline")
    assert "already overlaps with the step (it ends with a prefetch)" in recs[0].reason


def test_threshold_guards():
    with pytest.raises(ValueError, match="`input_bound_fraction` must be between 0 and 1"):
        DiagnosisThresholds(input_bound_fraction=1.5)
    with pytest.raises(TypeError, match="`compute_bound_fraction` must be a number"):
        DiagnosisThresholds(compute_bound_fraction="low")
    with pytest.raises(ValueError, match="`compute_bound_fraction` must be below"):
        DiagnosisThresholds(input_bound_fraction=0.2, compute_bound_fraction=0.2)
    with pytest.raises(ValueError, match="`launch_overhead_step_seconds` must be a non-negative"):
        DiagnosisThresholds(launch_overhead_step_seconds=-0.001)


def test_tiny_kernel_advice_quotes_gpu_util_and_sm_activity():
    recs = _recs(verdict=LAUNCH_OVERHEAD_BOUND, gpu_utilization=23.6, sm_activity=0.5)
    assert _actions(recs) == [
        "a larger batch: find_batch_size",
        "model.compile(..., steps_per_execution=N)",
        "XLA: model.compile(..., jit_compile=True)",
        "fewer, larger ops in the model",
        'mixed_precision("auto")',
    ]
    evidence = "GPU-Util was 23.6% during fit but SM activity only 0.5%"
    assert [evidence in r.reason for r in recs] == [True, False, True, True, True]
    assert "mixed_bfloat16 halves the bytes each kernel moves" in recs[4].reason
    # Where recommend_precision advises neither XLA nor mixed precision, neither is advised.
    plain = _recs(
        verdict=LAUNCH_OVERHEAD_BOUND,
        gpu_utilization=23.6,
        sm_activity=0.5,
        precision=CPU_WITHOUT_BF16,
    )
    assert _actions(plain) == [
        "a larger batch: find_batch_size",
        "model.compile(..., steps_per_execution=N)",
        "fewer, larger ops in the model",
    ]
