"""diagnose(): real fit runs on tiny models, exact state restoration, verdict rules, guards."""

from __future__ import annotations

import contextlib
import itertools
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from fakes import CostClock, FakeSource, charge_calls

import tfthroughput
from tfthroughput import build_pipeline, diagnose, recommend_precision
from tfthroughput.diagnosis.verdict import (
    COMPUTE_BOUND,
    INPUT_BOUND,
    LAUNCH_OVERHEAD_BOUND,
    DiagnosisThresholds,
)
from tfthroughput.hardware.utilization import gpu_utilization
from tfthroughput.precision import DeviceDescription


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
    clock = CostClock()

    def slow(x, y):
        def charge_then_return(x):
            clock.advance(0.03)  # a slow per-batch Python transformation: 30 ms a batch
            return x

        x = tf.py_function(charge_then_return, [x], tf.float32)
        x.set_shape([None, 8])
        return x, y

    dataset = _tiny_dataset(batch=8).map(slow)
    model = charge_calls(_tiny_model(), clock, launch=0.0, per_step=0.001)
    report = diagnose(model, dataset, steps=16, repeats=1, clock=clock)

    assert report.verdict == INPUT_BOUND
    # 1 ms a step in memory, 31 ms fed by the map: a fraction of 30/31 and 33.3 batches/s from
    # the pipeline alone, give or take the few batches tf.data's injected prefetch maps ahead of
    # its consumer (charged before the timed span begins, or inside the next).
    assert report.input_bound_fraction > 0.8, str(report)
    assert report.batch_size == 8
    assert report.compute_batches_per_second == pytest.approx(1000.0)
    assert 20.0 < report.input_batches_per_second < 60.0
    # The pipeline's own stage is named: its per-batch map runs sequentially.
    actions = [rec.action for rec in report.recommendations]
    assert actions == [
        "map(..., num_parallel_calls=tf.data.AUTOTUNE), or pass the function to build_pipeline "
        "as batch_fn",
        "build_pipeline: cache (in memory or to a file)",
    ]
    reason = report.recommendations[0].reason
    assert reason.startswith("stage 3: map(slow) (MapDataset): this per-batch map runs one")
    assert f"{report.input_batches_per_second:,.1f} batches/s" in reason


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_another_program_holding_a_core_while_the_input_is_timed_is_said(cpu_counters, mode):
    # The machine as the kernel's counters show it while another program spins on one of two
    # cores (benchmarks/pipeline_cpu_map.py --hog 1 reads 0.97-1.02 there, the same meter).
    cpu_counters.own_cores, cpu_counters.other_cores = 1.0, 1.0
    clock = CostClock()
    model = charge_calls(
        _tiny_model(),
        clock,
        launch=0.0,
        per_step=0.001,
        kind="train" if mode == "training" else "predict",
    )
    report = diagnose(model, _tiny_dataset(), steps=4, repeats=2, clock=clock, mode=mode)
    assert report.input_cpu.own_cores == pytest.approx(1.0, rel=0.01)
    assert report.input_cpu.other_cores == pytest.approx(1.0, rel=0.01)
    last = report.recommendations[-1]
    assert last.action == (
        "measure again with the CPU cores free: other programs held some while the input "
        "pipeline was timed"
    )
    assert (
        f"this process used 1.00 of the {report.input_cpu.cores} cores; other programs took 1.00"
        in last.reason
    )
    assert "measure again" in str(report)


def test_a_quiet_machine_adds_no_cpu_advice(cpu_counters):
    cpu_counters.other_cores = 0.3
    report = diagnose(_tiny_model(), _tiny_dataset(), steps=4, repeats=1)
    assert report.input_cpu.other_cores == pytest.approx(0.3, rel=0.01)
    assert not any("CPU cores free" in rec.action for rec in report.recommendations)


def test_a_pipeline_that_already_parallelises_caches_and_prefetches_gets_its_slow_stage_named():
    def slow_augment(x, y):
        def sleep_then_return(x):
            time.sleep(0.01)  # a slow per-example Python augmentation
            return x

        x = tf.py_function(sleep_then_return, [x], tf.float32)
        x.set_shape([8])
        return x, y

    dataset = build_pipeline(_arrays(), cache=True, augment_fn=slow_augment, batch_size=8)
    report = diagnose(_tiny_model(), dataset, steps=4, repeats=1)

    assert report.verdict == INPUT_BOUND, str(report)
    actions = [rec.action for rec in report.recommendations]
    # Nothing the pipeline already does is recommended again...
    assert not any("parallel map" in a or "cache" in a or "prefetch" in a for a in actions)
    # ...and the stage the profiler found slowest is named: the augment map (stage 3, after
    # from_tensor_slices and cache), which AUTOTUNE already runs in parallel.
    assert actions == ["make stage 3 (ParallelMapV2) cheaper: it is the slowest stage"]
    assert "AUTOTUNE runs it with parallelism=" in report.recommendations[0].reason


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

    # 20 ms a step, and nothing for the cached input: the same cost in memory and fed by the
    # dataset, a fraction of exactly 0 (on a real clock, one run in six measured 0.12).
    clock = CostClock()
    charge_calls(model, clock, launch=0.0, per_step=0.02)
    report = diagnose(model, dataset, steps=4, repeats=2, clock=clock)

    assert report.verdict == COMPUTE_BOUND, str(report)
    assert report.input_bound_fraction == pytest.approx(0.0, abs=1e-9)
    assert report.compute_step_seconds == pytest.approx(0.02)
    assert report.input_batches_per_second > report.compute_batches_per_second
    # Mixed precision and XLA exactly as recommend_precision() advises on this machine (on a
    # CPU: no XLA, and mixed_bfloat16 only with native bfloat16 instructions).
    precision = tfthroughput.recommend_precision()
    expected = (['mixed_precision("auto")'] if precision.policy != "float32" else []) + (
        ["XLA: model.compile(..., jit_compile=True)"] if precision.xla else []
    )
    actions = [rec.action for rec in report.recommendations]
    assert actions == [*expected, "a larger batch: find_batch_size"]


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
        precision=recommend_precision([DeviceDescription("GPU", "H200", (9, 0))]),
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


# ------------------------------------------------------------------------------ guards


def test_argument_guards():
    model, dataset = _tiny_model(), _tiny_dataset()
    with pytest.raises(TypeError, match=r"`model` must be a keras.Model. Received: model=3"):
        diagnose(3, dataset)
    uncompiled = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="`model` must be compiled"):
        diagnose(uncompiled, dataset)
    with pytest.raises(
        TypeError,
        match=r"`dataset` must be a tf.data.Dataset, a keras.utils.PyDataset, or NumPy arrays "
        r"\(x, with the targets as `y`\). Received: dataset=\[",
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
    with pytest.raises(TypeError, match="`precision` must be a PrecisionRecommendation"):
        diagnose(model, dataset, precision="float32")
    with pytest.raises(ValueError, match="`dataset` yielded no batch"):
        diagnose(model, dataset.take(0))
    assert int(model.optimizer.iterations.numpy()) == 0


def test_thresholds_are_used_as_given():
    strict = DiagnosisThresholds(
        input_bound_fraction=0.5, compute_bound_fraction=0.3, launch_overhead_step_seconds=0.0
    )
    report = diagnose(
        _tiny_model(), _tiny_dataset(), steps=2, repeats=1, clock=TickClock(), thresholds=strict
    )
    assert report.thresholds is strict
