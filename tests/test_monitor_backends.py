"""GPUMonitor beyond TensorFlow: the monitor's own tests re-run under Keras's JAX backend with
TensorFlow impossible to import, and event files written there read back by TensorFlow."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from events import read_scalars

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# The monitor's tests that run a real `fit` (or write events) with fake hardware.
MONITOR_TEST_FILES = (
    "test_autologging.py",
    "test_epoch_windows.py",
    "test_events.py",
    "test_example_count.py",
    "test_inference_calls.py",
    "test_live_run.py",
    "test_monitor.py",
    "test_monitor_lifecycle.py",
    "test_epoch_parts.py",
    "test_prometheus_sink.py",
)
# Backends other than TensorFlow that can be tried here: jax is a test dependency; torch runs
# too where it is installed.
OTHER_BACKENDS = [
    pytest.param(
        backend,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(backend) is None, reason=f"{backend} is not installed"
        ),
    )
    for backend in ("jax", "torch")
]


def _child_env(backend: str) -> dict[str, str]:
    inherited = os.environ.get("PYTHONPATH")
    path = os.pathsep.join(filter(None, [str(ROOT), str(TESTS), inherited]))
    return {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": path}


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_the_monitor_tests_pass_under_another_backend_without_tensorflow(backend):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "without_tensorflow",  # installed before any test module is imported
            "-m",
            "not tensorflow",  # keras.callbacks.TensorBoard and the like need TensorFlow
            *(str(TESTS / name) for name in MONITOR_TEST_FILES),
        ],
        capture_output=True,
        text=True,
        env=_child_env(backend),
        cwd=ROOT,
        timeout=540,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    files = " ".join(sorted(MONITOR_TEST_FILES))
    assert (
        f"keras backend: {backend}; tensorflow imported: False; files with passing tests: {files}"
    ) in output
    assert not re.search(r"\d+ (failed|errors?|skipped)", output), output[-2000:]


# A fit of 3 epochs under another backend, TensorFlow blocked, with a fake GPU whose readings
# follow the epoch; prints what History saw.
_FIT_WITHOUT_TENSORFLOW = """
import without_tensorflow  # noqa: F401  (first: TensorFlow is then impossible to import)
import json
import sys

import keras
import numpy as np
from fakes import FakeSource

import tfthroughput

epoch = {"now": -1}


class Dial(keras.callbacks.Callback):
    def on_epoch_begin(self, index, logs=None):
        epoch["now"] = index


def sources():
    reading = lambda _: {  # noqa: E731
        "utilization_percent": 10.0 * (epoch["now"] + 1),
        "sm_activity_percent": 2.5 * (epoch["now"] + 1),
        "power_watts": 100.0 + epoch["now"],
    }
    return [FakeSource("gpu0", reading), FakeSource("host", {"cpu_percent": 75.0})]


model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
monitor = tfthroughput.GPUMonitor(
    sys.argv[1], interval=0.05, sources=sources, batch_size=8, update_logs=True
)
history = model.fit(
    x, x.sum(axis=1), batch_size=8, epochs=3, callbacks=[Dial(), monitor], verbose=0
)
print(json.dumps({
    "backend": keras.config.backend(),
    "tensorflow": "tensorflow" in sys.modules,
    "iterations": int(model.optimizer.iterations),
    "history": {key: history.history[key] for key in (
        "gpu0_utilization_percent", "gpu0_busy_but_idle_percent", "steps_per_second", "seconds"
    )},
}))
"""


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_events_written_without_tensorflow_read_back_exactly_by_tensorflow(backend, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FIT_WITHOUT_TENSORFLOW), str(tmp_path)],
        capture_output=True,
        text=True,
        env=_child_env(backend),
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    child = json.loads(result.stdout.strip().splitlines()[-1])
    assert (child["backend"], child["tensorflow"], child["iterations"]) == (backend, False, 12)

    # Read here with TensorFlow's own record reader, as TensorBoard with TensorFlow would.
    scalars = read_scalars(tmp_path / "hardware")
    assert scalars["gpu0/utilization_percent/mean"] == [(0, 10.0), (1, 20.0), (2, 30.0)]
    assert scalars["gpu0/power_watts/max"] == [(0, 100.0), (1, 101.0), (2, 102.0)]
    assert scalars["gpu0/busy_but_idle_percent"] == [(0, 7.5), (1, 15.0), (2, 22.5)]
    assert scalars["host/cpu_percent/p95"] == [(0, 75.0), (1, 75.0), (2, 75.0)]
    history = child["history"]
    assert history["gpu0_utilization_percent"] == [10.0, 20.0, 30.0]
    assert history["gpu0_busy_but_idle_percent"] == [7.5, 15.0, 22.5]
    # Steps come from the optimizer's iteration counter: 4 per epoch on this backend too.
    for seconds, steps_per_second in zip(
        history["seconds"], history["steps_per_second"], strict=True
    ):
        assert steps_per_second * seconds == pytest.approx(4, rel=1e-6)
    logged_rates = [value for _, value in scalars["epoch/steps_per_second"]]
    assert logged_rates == pytest.approx(history["steps_per_second"], rel=1e-6)  # float32
