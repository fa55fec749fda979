"""diagnose(): real fit runs on tiny models, exact state restoration, verdict rules, guards."""

from __future__ import annotations

import contextlib
import itertools
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from fakes import FakeSource

from tfthroughput import diagnose
from tfthroughput.diagnosis.measure import _input_bound_fraction, _recommendations, _verdict
from tfthroughput.diagnosis.report import (
    BALANCED,
    COMPUTE_BOUND,
    INPUT_BOUND,
    LAUNCH_OVERHEAD_BOUND,
    DiagnosisThresholds,
)
from tfthroughput.hardware.utilization import gpu_utilization


def _tiny_model(optimizer="adam") -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(4),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=optimizer, loss="mse", metrics=["mae"])
    return model


def _arrays(n=64, features=8, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.random((n, features), dtype=np.float32),
        rng.random((n, 1), dtype=np.float32),
    )


def _tiny_dataset(batch=8) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(_arrays()).batch(batch)


def _values(variables) -> list[np.ndarray]:
    return [np.array(v.numpy(), copy=True) for v in variables]


class TickClock:
    """Advances one second per call, so every timed span is exactly 1 s."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def __call__(self) -> float:
        return float(next(self._ticks))


# ------------------------------------------------------------------ real measurements


def test_slow_input_pipeline_is_input_bound():
    def slow(x, y):
        def sleep_then_return(x):
            time.sleep(0.03)  # a slow per-batch Python transformation
            return x

        x = tf.py_function(sleep_then_return, [x], tf.float32)
        x.set_shape([None, 8])
        return x, y

    dataset = _tiny_dataset(batch=8).map(slow)
    report = diagnose(_tiny_model(), dataset, steps=4, repeats=1)

    assert report.verdict == INPUT_BOUND
    assert report.input_bound_fraction >= 0.25
    assert report.batch_size == 8
    # The pipeline alone is the limit: it cannot exceed 1 / 30 ms.
    assert report.input_batches_per_second < 1 / 0.03
    assert report.input_batches_per_second < report.compute_batches_per_second
    actions = [rec.action for rec in report.recommendations]
    assert actions[0].startswith("build_pipeline: parallel map")
    assert any("cache" in action for action in actions)
    assert f"{report.input_batches_per_second:,.1f} batches/s" in report.recommendations[0].reason


def test_compute_heavy_model_on_in_memory_data_is_compute_bound():
    model = keras.Sequential(
        [
            keras.Input((256,)),
            keras.layers.Dense(1024, activation="relu"),
            keras.layers.Dense(1024, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    x, y = _arrays(n=512, features=256)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(128).cache()

    report = diagnose(model, dataset, steps=10, repeats=5)

    assert report.verdict == COMPUTE_BOUND, str(report)
    assert report.input_bound_fraction <= 0.15
    assert report.compute_step_seconds >= 0.002
    assert report.input_batches_per_second > report.compute_batches_per_second
    actions = [rec.action for rec in report.recommendations]
    assert actions == [
        'mixed_precision("auto")',
        "XLA: model.compile(..., jit_compile=True)",
        "a larger batch: find_batch_size",
    ]


def test_model_and_optimizer_state_are_restored_exactly():
    model = _tiny_model()
    dataset = _tiny_dataset()
    model.fit(dataset, epochs=1, steps_per_epoch=3, verbose=0, shuffle=False)
    history = model.history
    before_model = _values(model.variables)
    before_optimizer = _values(model.optimizer.variables)
    before_metrics = _values(model.metrics_variables)
    assert int(model.optimizer.iterations.numpy()) == 3

    diagnose(model, dataset, steps=3, repeats=1)

    assert int(model.optimizer.iterations.numpy()) == 3
    for before, after in (
        (before_model, _values(model.variables)),
        (before_optimizer, _values(model.optimizer.variables)),
        (before_metrics, _values(model.metrics_variables)),
    ):
        assert len(before) == len(after)
        for old, new in zip(before, after, strict=True):
            np.testing.assert_array_equal(old, new)
    assert model.history is history


def test_unbuilt_model_and_optimizer_are_left_as_a_first_fit_finds_them():
    model = keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(1)])  # no Input
    model.compile(optimizer=keras.optimizers.SGD(momentum=0.9), loss="mse")

    diagnose(model, _tiny_dataset(), steps=2, repeats=1)

    assert model.built and model.optimizer.built
    assert int(model.optimizer.iterations.numpy()) == 0
    momentums = [v for v in model.optimizer.variables if "momentum" in v.path]
    assert len(momentums) == 4  # two kernels, two biases
    for momentum in momentums:
        np.testing.assert_array_equal(momentum.numpy(), np.zeros(momentum.shape))


def test_state_is_restored_when_a_measurement_fails():
    model = _tiny_model()
    dataset = _tiny_dataset()
    before = _values(model.variables)

    class Boom(Exception):
        pass

    @contextlib.contextmanager
    def failing_probe():
        raise Boom("probe failed")
        yield  # pragma: no cover

    with pytest.raises(Boom):
        diagnose(model, dataset, steps=2, repeats=1, utilization_probe=failing_probe)
    for old, new in zip(before, _values(model.variables), strict=True):
        np.testing.assert_array_equal(old, new)
    assert int(model.optimizer.iterations.numpy()) == 0


def test_tick_clock_gives_exact_rates():
    # Every timed span is 1 s: (a) steps batches after the first in 1 s, (b) and (c) one
    # epoch of `steps` steps in 1 s, so all rates equal `steps` and nothing waits on input.
    report = diagnose(_tiny_model(), _tiny_dataset(batch=4), steps=5, repeats=2, clock=TickClock())
    assert report.input_batches_per_second == 5.0
    assert report.compute_batches_per_second == 5.0
    assert report.fit_batches_per_second == 5.0
    assert report.input_examples_per_second == 20.0
    assert report.fit_examples_per_second == 20.0
    assert report.input_bound_fraction == 0.0
    assert report.verdict == COMPUTE_BOUND
    assert (report.batch_size, report.steps, report.repeats) == (4, 5, 2)
    assert report.gpu_utilization_percent is None


def test_utilization_probe_wraps_only_the_timed_fit_epochs():
    model = _tiny_model()
    events = []

    readings = iter([40.0, 45.0])

    @contextlib.contextmanager
    def probe():
        events.append(("enter", int(model.optimizer.iterations.numpy())))
        reading = next(readings)
        yield lambda: reading
        events.append(("exit", int(model.optimizer.iterations.numpy())))

    report = diagnose(model, _tiny_dataset(), steps=3, repeats=2, utilization_probe=probe)

    # Each round: (b) warm-up + timed epoch (6 steps), then (c) warm-up (3 steps), then the
    # probe spans (c)'s timed epoch (3 steps).
    assert events == [("enter", 9), ("exit", 12), ("enter", 21), ("exit", 24)]
    assert report.gpu_utilization_percent == 42.5
    assert "GPU utilization: 42% during (c)" in str(report)


def test_probe_reading_none_means_not_measured():
    @contextlib.contextmanager
    def probe():
        yield lambda: None

    report = diagnose(_tiny_model(), _tiny_dataset(), steps=2, repeats=1, utilization_probe=probe)
    assert report.gpu_utilization_percent is None


@pytest.mark.parametrize(
    "reading, error, match",
    [
        (150.0, ValueError, "between 0 and 100"),
        (-1, ValueError, "between 0 and 100"),
        ("busy", TypeError, "must be a number"),
        (True, TypeError, "must be a number"),
    ],
)
def test_probe_reading_is_checked(reading, error, match):
    @contextlib.contextmanager
    def probe():
        yield lambda: reading

    with pytest.raises(error, match=match):
        diagnose(_tiny_model(), _tiny_dataset(), steps=1, repeats=1, utilization_probe=probe)


# GPU-Util and SM activity of bf16 matmul loops on an H200: 64x64 (tiny kernels), 1024x1024,
# 8192x8192.
H200_ROWS = [(23.6, 0.5), (47.8, 27.5), (95.5, 92.5)]


@pytest.mark.parametrize(
    ("utilization", "sm_activity", "verdict"),
    [
        (*H200_ROWS[0], LAUNCH_OVERHEAD_BOUND),
        (*H200_ROWS[1], COMPUTE_BOUND),
        (*H200_ROWS[2], COMPUTE_BOUND),
    ],
)
def test_sm_activity_far_below_gpu_util_is_launch_overhead(utilization, sm_activity, verdict):
    # The tick clock makes every step 0.2 s: compute-bound by time alone. The default probe
    # samples a fake GPU replaying one row of the table.
    def probe():
        reading = {"utilization_percent": utilization, "sm_activity_percent": sm_activity}
        return gpu_utilization(0.05, sources=[FakeSource("gpu0", reading)])

    report = diagnose(
        _tiny_model(),
        _tiny_dataset(),
        steps=5,
        repeats=2,
        clock=TickClock(),
        utilization_probe=probe,
    )
    assert report.compute_step_seconds == 0.2
    assert report.gpu_utilization_percent == pytest.approx(utilization)
    assert report.sm_activity_percent == pytest.approx(sm_activity)
    assert report.verdict == verdict
    actions = [r.action for r in report.recommendations]
    if verdict == LAUNCH_OVERHEAD_BOUND:
        assert actions == [
            "a larger batch: find_batch_size",
            "model.compile(..., steps_per_execution=N)",
            "XLA: model.compile(..., jit_compile=True)",
            "fewer, larger ops in the model",
            'mixed_precision("auto")',
        ]
        evidence = "GPU-Util was 23.6% during fit but SM activity only 0.5%"
        assert all(
            evidence in r.reason for r in report.recommendations if "steps_per" not in r.action
        )
        assert f"SM activity {sm_activity:.1f}%" in str(report)
    else:
        assert "fewer, larger ops in the model" not in actions


def test_an_sm_activity_reading_is_checked():
    class Reading:
        def __call__(self):
            return 50.0

        def sm_activity(self):
            return 150.0

    @contextlib.contextmanager
    def probe():
        yield Reading()

    with pytest.raises(ValueError, match=r"`utilization_probe`'s sm_activity\(\) must be between"):
        diagnose(_tiny_model(), _tiny_dataset(), steps=1, repeats=1, utilization_probe=probe)


# ------------------------------------------------------------------------- pure rules


def test_input_bound_fraction_formula():
    assert _input_bound_fraction(100.0, 25.0) == 0.75
    assert _input_bound_fraction(100.0, 100.0) == 0.0
    assert _input_bound_fraction(100.0, 120.0) == 0.0  # noise: fit faster than compute
    assert _input_bound_fraction(float("inf"), 10.0) == 0.0


@pytest.mark.parametrize(
    "fraction, step_seconds, verdict",
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
def test_verdict_rules_with_default_thresholds(fraction, step_seconds, verdict):
    assert _verdict(fraction, step_seconds, DiagnosisThresholds()) == verdict


@pytest.mark.parametrize(
    ("fraction", "utilization", "sm_activity", "verdict"),
    [
        (0.0, 23.6, 0.5, LAUNCH_OVERHEAD_BOUND),
        (0.0, 47.8, 27.5, COMPUTE_BOUND),
        (0.0, 95.5, 92.5, COMPUTE_BOUND),
        (0.5, 23.6, 0.5, INPUT_BOUND),  # input first: its GPU idles whatever the kernels
        (0.0, 23.6, None, COMPUTE_BOUND),  # no GPM: GPU-Util alone proves nothing
    ],
)
def test_verdict_uses_sm_activity_when_measured(fraction, utilization, sm_activity, verdict):
    thresholds = DiagnosisThresholds()
    kwargs = {"gpu_utilization": utilization, "sm_activity": sm_activity}
    assert _verdict(fraction, 0.5, thresholds, **kwargs) == verdict


def test_thresholds_are_overridable():
    strict = DiagnosisThresholds(
        input_bound_fraction=0.5, compute_bound_fraction=0.3, launch_overhead_step_seconds=0.0
    )
    assert _verdict(0.4, 0.001, strict) == BALANCED
    assert _verdict(0.3, 0.001, strict) == COMPUTE_BOUND
    report = diagnose(
        _tiny_model(), _tiny_dataset(), steps=2, repeats=1, clock=TickClock(), thresholds=strict
    )
    assert report.thresholds is strict


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
    )
    arguments.update(overrides)
    return _recommendations(**arguments)


def test_recommendations_follow_the_measurements():
    # Pipeline fast enough alone but fit slower: overlap (prefetch) is the fix.
    recs = _recs(verdict=INPUT_BOUND, input_rate=80.0, fit_rate=20.0, fraction=0.6)
    assert [r.action for r in recs] == [
        "build_pipeline: prefetch(tf.data.AUTOTUNE) as the last stage"
    ]
    assert "delivers 80.0 batches/s, enough for the training step's 50.0" in recs[0].reason
    # Already mixed precision and XLA: only the batch size remains.
    recs = _recs(compute_dtype="bfloat16", jit_compiled=True)
    assert [r.action for r in recs] == ["a larger batch: find_batch_size"]
    # Low GPU utilization is quoted as the reason.
    recs = _recs(compute_dtype="float16", jit_compiled=True, gpu_utilization=35.0)
    assert "busy only 35% of the time" in recs[0].reason
    # Tiny steps: larger batch, steps_per_execution, XLA.
    recs = _recs(verdict=LAUNCH_OVERHEAD_BOUND, compute_rate=1000.0, fit_rate=1000.0)
    assert [r.action for r in recs] == [
        "a larger batch: find_batch_size",
        "model.compile(..., steps_per_execution=N)",
        "XLA: model.compile(..., jit_compile=True)",
    ]
    assert "takes 1.00 ms, under the 2.0 ms" in recs[0].reason
    # Balanced: both the input and the compute advice.
    recs = _recs(verdict=BALANCED, input_rate=40.0, fit_rate=40.0, fraction=0.2)
    assert [r.action for r in recs][:2] == [
        "build_pipeline: parallel map (num_parallel_calls=tf.data.AUTOTUNE)",
        "build_pipeline: cache (in memory or to a file)",
    ]
    assert 'mixed_precision("auto")' in [r.action for r in recs]


# ------------------------------------------------------------------------------ guards


def test_argument_guards():
    model, dataset = _tiny_model(), _tiny_dataset()
    with pytest.raises(TypeError, match=r"`model` must be a keras.Model. Received: model=3"):
        diagnose(3, dataset)
    uncompiled = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="`model` must be compiled"):
        diagnose(uncompiled, dataset)
    with pytest.raises(
        TypeError, match=r"`dataset` must be a tf.data.Dataset. Received: dataset=\["
    ):
        diagnose(model, [1, 2])
    with pytest.raises(ValueError, match="`steps` must be a positive int. Received: steps=0"):
        diagnose(model, dataset, steps=0)
    with pytest.raises(TypeError, match="`steps` must be a positive int. Received: steps=True"):
        diagnose(model, dataset, steps=True)
    with pytest.raises(TypeError, match=r"`steps` must be a positive int. Received: steps=2.0"):
        diagnose(model, dataset, steps=2.0)
    with pytest.raises(ValueError, match="`repeats` must be a positive int. Received: repeats=-1"):
        diagnose(model, dataset, repeats=-1)
    with pytest.raises(TypeError, match="`thresholds` must be a DiagnosisThresholds"):
        diagnose(model, dataset, thresholds={"input_bound_fraction": 0.5})
    with pytest.raises(TypeError, match="`utilization_probe` must be a callable"):
        diagnose(model, dataset, utilization_probe=50.0)
    with pytest.raises(TypeError, match="`clock` must be callable"):
        diagnose(model, dataset, clock=0.0)
    with pytest.raises(ValueError, match="`dataset` yielded no batch"):
        diagnose(model, dataset.take(0))
    assert int(model.optimizer.iterations.numpy()) == 0


def test_threshold_guards():
    with pytest.raises(ValueError, match="`input_bound_fraction` must be between 0 and 1"):
        DiagnosisThresholds(input_bound_fraction=1.5)
    with pytest.raises(TypeError, match="`compute_bound_fraction` must be a number"):
        DiagnosisThresholds(compute_bound_fraction="low")
    with pytest.raises(ValueError, match="`compute_bound_fraction` must be below"):
        DiagnosisThresholds(input_bound_fraction=0.2, compute_bound_fraction=0.2)
    with pytest.raises(ValueError, match="`launch_overhead_step_seconds` must be a non-negative"):
        DiagnosisThresholds(launch_overhead_step_seconds=-0.001)
