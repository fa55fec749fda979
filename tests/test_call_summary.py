from __future__ import annotations

import pytest
from fakes import FakeSource
from fits import BATCH_SIZE, EpochDial, data, fit, tiny_model

from tfthroughput import GPUMonitor
from tfthroughput.report.call_summary import CallSummary, read_call_summary


def summary(gpus=None, host=50.0, epochs=3, kind="fit", throughput=(900.0, 1000.0)):
    return CallSummary(kind, f"{kind}-1", epochs, throughput, gpus or {}, host)


@pytest.mark.parametrize(
    ("gpus", "host", "start"),
    [
        ({"gpu0": 95.0}, 30.0, "the GPU is busy; next: "),
        (
            {"gpu0": 20.0, "gpu1": 35.0},
            97.0,
            "the GPU waits, the host CPU is busy: likely the input",
        ),
        ({"gpu0": 20.0}, 15.0, "the GPU waits, the host is idle: launch overhead?"),
        ({}, 15.0, "no GPU sampled; `tfthroughput info`"),
        ({}, 99.0, "no GPU sampled, the host CPU is busy: it ran on the CPU"),
    ],
)
def test_the_reading_follows_gpu_busy_and_host_cpu(gpus, host, start):
    assert summary(gpus, host).reading().startswith(start)


def test_each_reading_names_the_next_thing_to_try():
    readings = [
        summary({"gpu0": 95.0}).reading(),
        summary({"gpu0": 20.0}, 97.0).reading(),
        summary({"gpu0": 20.0}, 15.0).reading(),
    ]
    assert "mixed_float16" in readings[0]
    assert "build_pipeline" in readings[1]
    assert "steps_per_execution=32" in readings[2]
    assert all(len(f"  reading: {reading}") <= 100 for reading in readings)


def test_lines_state_epochs_steady_throughput_with_range_gpus_and_host():
    assert summary({"gpu1": 41.6, "gpu0": 38.2}, 55.4).lines()[:2] == [
        "fit-1: 3 epochs, 950 examples/s, epochs 2+ (range 900-1,000)",
        "  GPU busy: gpu0 38 %, gpu1 42 %; host CPU: 55 %",
    ]
    assert summary(kind="predict", epochs=1, throughput=(2500.0,), host=None).lines()[:2] == [
        "predict-1: 1 call, 2,500 examples/s, all",
        "  GPU busy: not measured (no NVIDIA GPU, driver or NVML library here); "
        "host CPU: not measured",
    ]
    # A run of several calls (a monitor passed to each, or autolog's for a model's loop).
    looped = summary(kind="predict", epochs=20, throughput=(2400.0, 2600.0))
    assert (
        looped.lines()[0] == "predict-1: 20 calls, 2,500 examples/s, calls 2+ (range 2,400-2,600)"
    )
    assert summary(epochs=0, throughput=()).lines()[0] == "fit-1: 0 epochs, examples/s not logged"
    assert summary(epochs=0, throughput=()).reading() == "no epoch ended, so nothing was measured"


def test_read_from_the_event_files_of_a_real_fit_and_evaluate(tmp_path):
    dial = EpochDial()
    readings = {0: 10.0, 1: 60.0, 2: 80.0}

    def gpu():
        reading = lambda _: {"utilization_percent": readings.get(dial.epoch, 10.0)}  # noqa: E731
        return [FakeSource("gpu0", reading)]

    monitor = GPUMonitor(tmp_path, interval=0.05, sources=gpu, run_name="fit-1")
    model = tiny_model()
    fit(model, [dial, monitor], epochs=3)
    x, y = data()
    model.evaluate(x, y, batch_size=BATCH_SIZE, verbose=0, callbacks=[monitor])

    trained = read_call_summary("fit", "fit-1", str(tmp_path / "fit-1"))
    assert (trained.epochs, len(trained.examples_per_second)) == (3, 2)  # epochs 2 and 3
    assert trained.gpu_percent == {"gpu0": 70.0}  # the median of epochs 2 and 3
    evaluated = read_call_summary("evaluate", "fit-1", str(tmp_path / "fit-1" / "evaluate"))
    assert (evaluated.epochs, evaluated.gpu_percent) == (1, {"gpu0": 80.0})
    assert evaluated.examples_per_second and evaluated.examples_per_second[0] > 0
