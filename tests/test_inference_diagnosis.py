"""diagnose(..., mode="inference"): real predict runs on tiny models, exact rates on a tick
clock, the verdict and advice that fit inference."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from fakes import CostClock, FakeSource, charge_calls

from tfthroughput import diagnose, recommend_precision
from tfthroughput.diagnosis.inference_diagnosis import diagnose_inference
from tfthroughput.diagnosis.verdict import COMPUTE_BOUND, INPUT_BOUND, LAUNCH_OVERHEAD_BOUND
from tfthroughput.hardware.utilization import gpu_utilization
from tfthroughput.precision import DeviceDescription

H200 = recommend_precision([DeviceDescription("GPU", "H200", (9, 0))])


def _model() -> keras.Model:  # not compiled: predict needs no optimizer
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])


def _dataset(batch=4) -> tf.data.Dataset:
    x = np.random.default_rng(0).random((64, 8), dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(batch)


class TickClock:
    """Advances one second per call, so every timed span is exactly 1 s."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def __call__(self) -> float:
        return float(next(self._ticks))


def test_tick_clock_gives_exact_rates_and_a_report_about_predict():
    report = diagnose(_model(), _dataset(), steps=5, repeats=2, clock=TickClock(), mode="inference")
    assert report.mode == "inference"
    # Each timed span is 1 s: (a) 5 batches after the first, (b) and (c) the 5 timed batches.
    assert report.input_batches_per_second == 5.0
    assert report.compute_batches_per_second == 5.0
    assert report.fit_batches_per_second == 5.0
    assert report.fit_examples_per_second == 20.0
    assert (report.verdict, report.input_bound_fraction) == (COMPUTE_BOUND, 0.0)
    text = str(report)
    assert text.startswith("tfthroughput inference diagnosis (batch size 4")
    assert "(b) predict step alone" in text and "(c) predict, both together" in text
    assert "the predict step itself is the bottleneck" in text
    # Mixed precision and XLA as recommend_precision() advises on this CPU: mixed_bfloat16 only
    # where the CPU has native bfloat16 instructions (AVX512-BF16, AMX-BF16).
    precision = recommend_precision()
    expected = ["a larger batch: model.predict(..., batch_size=16) or more"]
    expected += ["XLA: model.compile(..., jit_compile=True)"] if precision.xla else []
    expected += ['mixed_precision("auto")'] if precision.policy != "float32" else []
    assert [r.action for r in report.recommendations] == expected


def test_a_slow_input_pipeline_makes_inference_input_bound_with_pipeline_advice():
    clock = CostClock()

    def slow(x, y):
        def charge_then_return(x):
            clock.advance(0.03)  # a slow per-batch Python transformation: 30 ms a batch
            return x

        x = tf.py_function(charge_then_return, [x], tf.float32)
        x.set_shape([None, 8])
        return x, y

    dataset = _dataset(batch=8).map(slow)
    model = charge_calls(_model(), clock, launch=0.0, per_step=0.005, kind="predict")
    report = diagnose_inference(model, dataset, steps=16, repeats=1, clock=clock)
    assert report.verdict == INPUT_BOUND
    # 5 ms a step in memory, 35 ms fed by the map: a fraction of 6/7.
    assert report.compute_batches_per_second == pytest.approx(200.0)
    assert report.input_bound_fraction > 0.7, str(report)
    # 33.3 batches/s, give or take the few batches tf.data's injected prefetch maps ahead of its
    # consumer (charged before the timed span begins, or inside the next).
    assert 20.0 < report.input_batches_per_second < 60.0
    actions = [r.action for r in report.recommendations]
    assert actions[0].startswith("map(..., num_parallel_calls=tf.data.AUTOTUNE)")
    assert not [action for action in actions if "batch_size" in action or "XLA" in action]


def test_tiny_kernels_at_inference_get_batch_steps_per_execution_xla_and_precision_advice():
    def probe():  # a fake GPU: busy 60 % of the time, its SMs 5 %
        reading = {"utilization_percent": 60.0, "sm_activity_percent": 5.0}
        return gpu_utilization(0.05, sources=[FakeSource("gpu0", reading)])

    report = diagnose_inference(
        _model(),
        _dataset(),
        steps=5,
        repeats=1,
        clock=TickClock(),
        utilization_probe=probe,
        precision=H200,
    )
    assert report.gpu_utilization_percent == pytest.approx(60.0)
    assert report.verdict == LAUNCH_OVERHEAD_BOUND
    recommendations = {r.action: r.reason for r in report.recommendations}
    assert list(recommendations) == [
        "a larger batch: model.predict(..., batch_size=16) or more",
        "model.compile(..., steps_per_execution=N)",
        "XLA: model.compile(..., jit_compile=True)",
        'mixed_precision("auto")',
    ]
    assert (
        "GPU-Util was 60.0% but SM activity only 5.0%"
        in recommendations["a larger batch: model.predict(..., batch_size=16) or more"]
    )
    assert "no loss scaling" in recommendations['mixed_precision("auto")']


def test_arguments_are_checked():
    with pytest.raises(
        ValueError,
        match=r"`mode` must be \"training\" or \"inference\". "
        r"Received: mode='serving'",
    ):
        diagnose(_model(), _dataset(), mode="serving")
    with pytest.raises(TypeError, match="`dataset` must be a tf.data.Dataset"):
        diagnose_inference(_model(), np.zeros((4, 8)))
    with pytest.raises(TypeError, match="`model` must be a keras.Model"):
        diagnose_inference("model", _dataset())
    with pytest.raises(ValueError, match="`steps` must be"):
        diagnose_inference(_model(), _dataset(), steps=0)
