"""tune beyond TensorFlow: its tests re-run under Keras's JAX backend (and PyTorch where
installed) with TensorFlow impossible to import, as tests/test_monitor_backends.py does for the
monitor. The pipeline knob needs TensorFlow: its tests carry the ``tensorflow`` marker."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# The files whose tests run real Keras work (fits, predicts, tune itself); the engine's and
# the knobs' logic on fakes is the same on every backend.
TUNE_TEST_FILES = (
    "test_loss_check.py",
    "test_tune_arguments.py",
    "test_tune_inference.py",
    "test_tune_measure.py",
    "test_tune_predict_runner.py",
    "test_tune_replay.py",
    "test_tune_result.py",
    "test_tune_search.py",
    "test_tune_setup.py",
    "test_tune_trial_runner.py",
    "test_tuner.py",
)
OTHER_BACKENDS = [
    pytest.param(
        backend,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(backend) is None, reason=f"{backend} is not installed"
        ),
    )
    for backend in ("jax", "torch")
]


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_the_tune_tests_pass_under_another_backend_without_tensorflow(backend):
    path = os.pathsep.join(filter(None, [str(ROOT), str(TESTS), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "without_tensorflow",
            "-m",
            "not tensorflow and not same_on_every_backend",
            *(str(TESTS / name) for name in TUNE_TEST_FILES),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": path},
        cwd=ROOT,
        timeout=540,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    files = " ".join(sorted(TUNE_TEST_FILES))
    assert (
        f"keras backend: {backend}; tensorflow imported: False; files with passing tests: {files}"
    ) in output
    assert not re.search(r"\d+ (failed|errors?|skipped)", output), output[-2000:]
