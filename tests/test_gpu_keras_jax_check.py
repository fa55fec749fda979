"""`benchmarks/gpu_keras_jax_check.py`, the GPU machine's check of GPUMonitor under JAX, run
here end to end on fakes: the fake NVML library, a fake `nvidia-smi` on PATH, JAX on the CPU,
TensorFlow blocked."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import pytest
from fake_nvml import run_python_with_fake_nvml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_keras_jax_check.py"

# Prints what the fake NVML library reports for device 0: GPU-Util 40 %, 1 GiB used. Every 10 ms
# (the real poll is 100 ms), so that an epoch cut short by a calibration taken under load still
# holds rows: the verdict must not rest on how long an epoch ran.
FAKE_NVIDIA_SMI = """\
import sys
import time

assert "--query-gpu=utilization.gpu,memory.used" in sys.argv, sys.argv
assert "--id=GPU-00000000-0000-0000-0000-000000000000" in sys.argv, sys.argv
while True:
    print("40, 1024", flush=True)
    time.sleep(0.01)
"""

RUN_SCRIPT = f"""
import without_tensorflow  # noqa: F401
import runpy
import sys

sys.argv = [
    "gpu_keras_jax_check.py", "--allow-cpu", "--epochs", "2", "--epoch-seconds", "1",
    "--models", "tiny16", "tiny16-spe64",
]
runpy.run_path({str(SCRIPT)!r}, run_name="__main__")
"""


def test_the_check_compares_every_epoch_with_nvidia_smi(fake_nvml_dir, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\n{FAKE_NVIDIA_SMI}")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "KERAS_BACKEND": "jax",
        "FAKE_NVML_DEVICE_COUNT": "1",
        "FAKE_NVML_GPM_SUPPORTED": "1",
    }
    result = run_python_with_fake_nvml(RUN_SCRIPT, fake_nvml_dir, env=env, timeout=300)
    output = result.stdout
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]

    lines = output.splitlines()
    assert lines[0].startswith("keras ") and "on jax" in lines[0]
    assert lines[1] == "gpu0 = Fake GPU 0 (GPU-00000000-0000-0000-0000-000000000000)"
    rows = [line.split() for line in lines if re.match(r"tiny16(-spe64)? +\d ", line)]
    assert [(row[0], row[1]) for row in rows] == [
        ("tiny16", "0"),
        ("tiny16", "1"),
        ("tiny16-spe64", "0"),
        ("tiny16-spe64", "1"),
    ]
    for row in rows:
        # model ep steps s  util / smi  MiB / smi  rows  SM  tensor  busy-idle  energy / PxT
        assert row[4:10] == ["40.0", "/", "40.0", "1024", "/", "1024"], row
        assert int(row[10]) >= 1  # nvidia-smi lines inside the epoch
        assert row[11:14] == ["60.0", "25.0", "0.0"], row  # the fake's GPM; 40 - 60 -> 0
        assert row[14] == "n/a" or float(row[14]) > 0  # the energy tag, where logged
        # Power x time: the fake's 150 W x the epoch's seconds (shown to 0.01 s, so +-0.75 J).
        assert float(row[16]) == pytest.approx(150.0 * float(row[3]), abs=0.8)
    assert "tensorflow imported: False" in lines
    assert re.fullmatch(
        r"SUMMARY gpu keras jax check: 4 epochs; GPU-Util monitor vs nvidia-smi max gap 0\.0 pp; "
        r"memory max gap 0 MiB; (no energy tag logged \(power x time only\)|energy counter vs "
        r"power x time within [\d.]+%); tiny kernels \(tiny16(-spe64)?\): GPU-Util 40\.0 %, "
        r"SM activity 60\.0 %, warned: no",
        lines[-1],
    ), lines[-1]
