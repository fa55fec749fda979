"""The reading of the wait share in words, on known shares (xprof's thresholds, 5 % and 20 %),
with the hardware's own figure beside it, and over a whole fit weighted by epoch time."""

from __future__ import annotations

from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.hardware.stats import summarize
from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.input_reading import (
    INPUT_BOUND_PERCENT,
    STEP_BOUND_PERCENT,
    FitWait,
    input_reading,
)


def _stats(**means: float) -> WindowStats:
    keys = {
        "gpu": SampleKey("gpu0", "utilization_percent"),
        "cpu": SampleKey("host", "cpu_percent"),
    }
    return WindowStats(
        {keys[name]: summarize([value]) for name, value in means.items()},
        start=0.0,
        end=1.0,
        buffer_samples={},
    )


def test_the_thresholds_are_xprofs():
    assert (STEP_BOUND_PERCENT, INPUT_BOUND_PERCENT) == (5.0, 20.0)
    assert input_reading(62.0) == (
        "input-bound (62 % of the time waiting for batches): "
        "try build_pipeline / tfthroughput.diagnose"
    )
    assert input_reading(20.0).startswith("input-bound (20 %")
    assert input_reading(19.9).startswith("partly input-bound (20 %")  # rounded for reading
    assert input_reading(5.0).startswith("partly input-bound (5 %")
    assert (
        input_reading(4.9) == "the step itself is the limit (5 % of the time waiting for batches)"
    )
    assert input_reading(None) is None


def test_gpu_util_is_shown_beside_it_else_the_hosts_cpu():
    assert input_reading(62.0, _stats(gpu=38.0, cpu=90.0)).startswith(
        "input-bound (62 % of the time waiting for batches; GPU-Util 38 %)"
    )
    assert input_reading(1.0, _stats(cpu=97.0)) == (
        "the step itself is the limit (1 % of the time waiting for batches; host CPU 97 %)"
    )


def test_a_fit_weighs_each_epoch_by_its_time():
    fit = FitWait()
    assert fit.reading() is None
    fit.add(50.0, 3.0, _stats(gpu=40.0))
    fit.add(10.0, 1.0, _stats(gpu=80.0))
    fit.add(None, 5.0, _stats())  # an epoch that measured no wait
    assert fit.reading().startswith(
        "input-bound (40 % of the time waiting for batches; GPU-Util 80"
    )
