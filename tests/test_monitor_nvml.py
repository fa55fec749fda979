"""`GPUMonitor` with its default sources, through the real pynvml bindings and the fake
`libnvidia-ml.so.1`: a real `model.fit` in a child process, event files read back here.

Two child processes only: each imports TensorFlow (seconds).
"""

from __future__ import annotations

import pytest
from events import read_scalars
from fake_nvml import run_json_with_fake_nvml

# Fits a tiny model with GPUMonitor (default sources) EPOCHS epochs, then once more with the
# same callback; prints the GPU/host entries of History and what the child saw.
_FIT = """
import os
import numpy as np
import keras
from tfthroughput.monitor.gpu_monitor import GPUMonitor

keras.utils.set_random_seed(0)
x = np.linspace(0.0, 1.0, 128, dtype="float32").reshape(32, 4)
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
epochs = int(os.environ["EPOCHS"])
monitor = GPUMonitor(
    os.environ["LOG_DIR"], interval=float(os.environ["INTERVAL"]), update_logs=True, batch_size=8
)
history = model.fit(x, y, batch_size=8, epochs=epochs, callbacks=[monitor], verbose=0)
# The callback is reused: NVML must not be initialised again.
model.fit(x, y, batch_size=8, initial_epoch=epochs, epochs=epochs + 1, callbacks=[monitor],
          verbose=0)
import pynvml
emit({
    "history": {k: v for k, v in history.history.items() if k.startswith(("gpu", "host"))},
    "inits": pynvml.nvmlLib.fakeNvmlInitCount(),
    "warned": warned(),
})
"""


def _read_scalars(run_dir: str) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} from every event file in `run_dir`; each step written once."""
    scalars = {}
    for tag, points in read_scalars(run_dir).items():
        steps = [step for step, _ in points]
        assert len(steps) == len(set(steps)), (tag, steps)
        scalars[tag] = dict(points)
    return scalars


def _gpu_expected(i: int) -> dict[str, float]:
    return {
        "utilization_percent": 40.0 + i,
        "memory_utilization_percent": 20.0 + i,
        "memory_used_gib": 1.0 + i,
        "memory_used_percent": 1.25 * (1 + i),  # (1 + i) GiB of 80 GiB
        "memory_reserved_gib": 0.5,
        "power_watts": 150.0 + i,
        "temperature_celsius": 50.0 + i,
        "sm_clock_mhz": 1500.0 + i,
    }


def test_fit_logs_exact_per_device_values(fake_nvml_dir, tmp_path):
    out = run_json_with_fake_nvml(
        _FIT,
        fake_nvml_dir,
        env={"LOG_DIR": str(tmp_path), "EPOCHS": "2", "INTERVAL": "0.05"},
        timeout=180,
    )
    assert out["inits"] == 1
    assert out["warned"] == []
    scalars = _read_scalars(str(tmp_path / "hardware"))
    steps = {0, 1, 2}
    for i in range(2):
        for metric, value in _gpu_expected(i).items():
            for statistic in ("mean", "min", "max", "p95"):
                tag = f"gpu{i}/{metric}/{statistic}"
                assert scalars[tag] == dict.fromkeys(steps, value), tag
            assert out["history"][f"gpu{i}_{metric}"] == [value, value]
    gpu_tags = {tag for tag in scalars if tag.startswith("gpu")}
    expected_tags = {
        f"gpu{i}/{metric}/{statistic}"
        for i in range(2)
        for metric in _gpu_expected(i)
        for statistic in ("mean", "min", "max", "p95")
    } | {"gpu0/samples", "gpu1/samples"}
    energy_tags = {f"gpu{i}/energy_joules{end}" for i in range(2) for end in ("", "/from_counter")}
    assert gpu_tags == expected_tags | energy_tags  # no GPM tags: the fakes do not support it
    # The fake's energy counter runs at (150 + i) W: an epoch's energy is that power times the
    # time from the window's start to the reading that ends it; epoch/seconds also holds part
    # of the hooks' own time around them (milliseconds; tens on a loaded machine). The counter
    # moves during each NVML call while the sampler times the read once, so a read's energy
    # may span a little more than its time: 10 ms of slack on the upper bound (1.5 J at 150 W;
    # measured excesses were 0.15 and 0.4 ms).
    read_slack_seconds = 0.01
    for step in steps:
        seconds = scalars["epoch/seconds"][step]
        for i in range(2):
            joules = scalars[f"gpu{i}/energy_joules"][step]
            upper = (150 + i) * (seconds + read_slack_seconds)
            assert (150 + i) * (seconds - 0.1) < joules <= upper, (step, i)
            assert scalars[f"gpu{i}/energy_joules/from_counter"][step] == 1.0
        examples = scalars["epoch/examples_per_second"][step] * seconds
        both = scalars["gpu0/energy_joules"][step] + scalars["gpu1/energy_joules"][step]
        assert scalars["epoch/joules_per_example"][step] == pytest.approx(both / examples)
    assert len(out["history"]["gpu0_energy_joules"]) == 2
    # every sample reads every source
    for step in steps:
        samples = {scalars[f"{name}/samples"][step] for name in ("gpu0", "gpu1", "host")}
        assert len(samples) == 1
        assert samples.pop() >= 1
    # (host CPU percentages need 0.1 s per reading thread, which the one-step fit may not last)
    assert set(scalars["host/ram_used_percent/mean"]) == steps
    assert set(scalars["epoch/seconds"]) == steps


def test_gpu_lost_during_fit_stops_its_tags_only(fake_nvml_dir, tmp_path):
    # A long interval leaves exactly one sample per epoch: the one taken at the epoch's end.
    # The fake loses GPU 1 right after its 3rd utilization reading, in the middle of the 3rd
    # sample (epoch 2), which is then dropped: its tags stop after epoch 1.
    out = run_json_with_fake_nvml(
        _FIT,
        fake_nvml_dir,
        env={
            "LOG_DIR": str(tmp_path),
            "EPOCHS": "3",
            "INTERVAL": "600",
            "FAKE_NVML_LOST_INDEX": "1",
            "FAKE_NVML_LOST_AFTER": "3",
        },
        timeout=180,
    )
    assert out["inits"] == 1
    assert out["warned"] == [
        "gpu1 (Fake GPU 1, GPU-00000000-0000-0000-0000-000000000001): NVML reports "
        "'GPU is lost'; it is no longer sampled, other devices continue",
        # The second fit lists the GPUs again: the lost one is skipped, gpu0 is sampled.
        "gpu1 (NVML index 1) is not sampled: NVML reports 'GPU is lost'; other devices continue",
    ]
    scalars = _read_scalars(str(tmp_path / "hardware"))
    assert scalars["host/samples"] == {0: 1, 1: 1, 2: 1, 3: 1}
    assert scalars["gpu0/samples"] == {0: 1, 1: 1, 2: 1, 3: 1}
    assert scalars["gpu1/samples"] == {0: 1, 1: 1}
    assert scalars["gpu0/power_watts/mean"] == {0: 150.0, 1: 150.0, 2: 150.0, 3: 150.0}
    assert scalars["gpu1/power_watts/mean"] == {0: 151.0, 1: 151.0}
    assert out["history"]["gpu1_utilization_percent"] == [41.0, 41.0]
    assert out["history"]["gpu0_utilization_percent"] == [40.0, 40.0, 40.0]


# GPUMonitor at its default 1 s interval on a GPU whose GPU-Util buffer holds 100, 0, 0, 0, 0
# repeating every 200 ms while the point query says 0 (a 20 %-busy GPU that 1 s polling in step
# with it would call idle). Callbacks before and after the monitor record when its epoch hooks
# ran, on the wall clock of the fake's timestamps.
_ALIASING_FIT = """
import ctypes
import os
import time
import numpy as np
import keras
import pynvml
from tfthroughput.monitor.gpu_monitor import GPUMonitor

class Stamp(keras.callbacks.Callback):
    def __init__(self, times):
        super().__init__()
        self.times = times

    def on_epoch_begin(self, epoch, logs=None):
        self.times.setdefault(epoch, []).append(time.time())

    def on_epoch_end(self, epoch, logs=None):
        self.times[epoch].append(time.time())

class SlowSteps(keras.callbacks.Callback):  # epochs of ~1.5 s: a few buffer samples each
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.25)

before, after = {}, {}
x = np.ones((12, 4), "float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
monitor = GPUMonitor(
    os.environ["LOG_DIR"], hardware_metrics=["utilization_percent"], update_logs=True
)
history = model.fit(
    x, x[:, :1], batch_size=2, epochs=3, verbose=0,
    callbacks=[Stamp(before), monitor, Stamp(after), SlowSteps()],
)
pynvml.nvmlLib.fakeNvmlSamplesOrigin.restype = ctypes.c_ulonglong
emit({
    "origin": pynvml.nvmlLib.fakeNvmlSamplesOrigin() / 1e6,
    # per epoch: [before begin, after begin, before end, after end]
    "hooks": [[before[e][0], after[e][0], before[e][1], after[e][1]] for e in range(3)],
    "history": history.history["gpu0_utilization_percent"],
    "warned": warned(),
})
"""


def _possible_windows(origin, hooks, script, period=0.2):
    """(count, mean) of every set of buffer samples the epoch's window may hold.

    Samples between the hooks' stamps around the monitor's cut may fall either side of it; the
    others are certainly in (or out of) the window.
    """
    begin_low, begin_high, end_low, end_high = (t - origin for t in hooks)
    sure = [k for k in range(int(end_high / period) + 2) if begin_high < k * period < end_low]
    unsure = [
        k
        for k in range(int(end_high / period) + 2)
        if begin_low <= k * period <= begin_high or end_low <= k * period <= end_high
    ]
    options = set()
    for mask in range(2 ** len(unsure)):
        ks = sure + [k for bit, k in enumerate(unsure) if mask >> bit & 1]
        values = [script[k % len(script)] for k in ks]
        if values:
            options.add((len(values), sum(values) / len(values)))
    return options


def test_default_interval_reports_the_buffers_mean_where_polling_would_alias(
    fake_nvml_dir, tmp_path
):
    script = [100.0, 0.0, 0.0, 0.0, 0.0]
    out = run_json_with_fake_nvml(
        _ALIASING_FIT,
        fake_nvml_dir,
        env={
            "LOG_DIR": str(tmp_path),
            "FAKE_NVML_DEVICE_COUNT": "1",
            "FAKE_NVML_SAMPLES_GPU": "100,0,0,0,0",
            "FAKE_NVML_UTILIZATION_GPU": "0",
        },
        timeout=180,
    )
    assert out["warned"] == []
    scalars = _read_scalars(str(tmp_path / "hardware"))
    for epoch, hooks in enumerate(out["hooks"]):
        logged = (
            scalars["gpu0/utilization_percent/samples"][epoch],
            scalars["gpu0/utilization_percent/mean"][epoch],
        )
        options = _possible_windows(out["origin"], hooks, script)
        assert any(
            logged[0] == count and abs(logged[1] - mean) < 1e-4 for count, mean in options
        ), (epoch, logged, options)
        assert logged[0] >= 6  # ~1.5 s of 200 ms samples, at one read per second
        assert out["history"][epoch] == pytest.approx(logged[1], abs=1e-4)
        # the epoch holds a 100 sample, which the point reading (0) never shows
        assert scalars["gpu0/utilization_percent/max"][epoch] == 100.0
    assert "gpu0/samples" not in scalars  # only a buffered metric: its count is the tag
