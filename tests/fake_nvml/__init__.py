"""A fake `libnvidia-ml.so.1` for driving the real `pynvml` bindings without a GPU.

`fake_nvml.c` (next to this file) implements the NVML symbols that the sampler's pynvml calls
resolve, with deterministic per-device values and failure switches set through environment
variables; its header comment is the reference for both. This module compiles it and runs
Python code against it in a child process: pynvml `dlopen`s `libnvidia-ml.so.1` by name, and
the dynamic loader reads `LD_LIBRARY_PATH` only at process start, so the library cannot be
swapped into the running test process.

Example:
    lib_dir = build_fake_nvml(tmp_path)
    result = run_python_with_fake_nvml(
        "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())",
        lib_dir,
        env={"FAKE_NVML_DEVICE_COUNT": "3"},
    )
    assert result.stdout.strip() == "3"
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"

# Environment variables the fake library reads; cleared from the child's environment unless a
# test sets them, so a stray setting in the developer's shell cannot change results.
ENV_VARS = (
    "FAKE_NVML_DEVICE_COUNT",
    "FAKE_NVML_INIT_ERROR",
    "FAKE_NVML_UNSUPPORTED",
    "FAKE_NVML_ERRORS",
    "FAKE_NVML_LOST_INDEX",
    "FAKE_NVML_LOST_AFTER",
    "FAKE_NVML_GPM_SUPPORTED",
    "FAKE_NVML_UTILIZATION_GPU",
    "FAKE_NVML_ENERGY",
    "FAKE_NVML_PROCESSES",
    "FAKE_NVML_MIG",
    "FAKE_NVML_SAMPLES_GPU",
    "FAKE_NVML_SAMPLES_MEMORY",
    "FAKE_NVML_SAMPLES_POWER",
    "FAKE_NVML_SAMPLES_PERIOD_MS",
    "FAKE_NVML_SAMPLES_CAPACITY",
    "FAKE_NVML_SAMPLES_CLOCK",
)


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def build_fake_nvml(directory: str | os.PathLike[str]) -> Path:
    """Compiles `fake_nvml.c` into `directory/libnvidia-ml.so.1`.

    Args:
        directory: Folder to write the library into; created if missing.

    Returns:
        The folder, as a `Path`, ready to be used as `LD_LIBRARY_PATH`.

    Raises:
        pytest.skip.Exception: When no C compiler is available or the platform is not Linux.
        RuntimeError: When the compiler fails (the message holds its output).
    """
    if not sys.platform.startswith("linux"):
        pytest.skip("the fake NVML library is built for Linux only")
    compiler = _compiler()
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the fake NVML library")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    output = directory / LIBRARY_NAME
    command = [compiler, "-shared", "-fPIC", "-O1", "-pthread", "-o", str(output), str(SOURCE)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"compiling the fake NVML library failed ({' '.join(command)}):\n"
            f"{result.stdout}{result.stderr}"
        )
    return directory


def run_python_with_fake_nvml(
    code: str,
    lib_dir: str | os.PathLike[str] | None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Runs `python -c code` in a child process that loads the fake NVML library.

    The child inherits this process's environment and working directory, with
    `LD_LIBRARY_PATH` set to `lib_dir` (prepended to any existing value), every `FAKE_NVML_*`
    variable removed, and then `env` applied on top.

    Args:
        code: Python source to run.
        lib_dir: Folder holding `libnvidia-ml.so.1` (from `build_fake_nvml`). `None` runs the
            child with `LD_LIBRARY_PATH` unset, i.e. against whatever NVML the system has.
        env: Extra environment variables for the child, e.g. `{"FAKE_NVML_DEVICE_COUNT": "1"}`.
            Values must be strings.
        timeout: Seconds before the child is killed (`subprocess.TimeoutExpired` is raised).

    Returns:
        The `subprocess.CompletedProcess` with text `stdout` and `stderr`; the return code is
        not checked, so tests can assert on failures too.
    """
    child_env = {key: value for key, value in os.environ.items() if key not in ENV_VARS}
    child_env.pop("LD_LIBRARY_PATH", None)
    if lib_dir is not None:
        inherited = os.environ.get("LD_LIBRARY_PATH")
        child_env["LD_LIBRARY_PATH"] = (
            f"{lib_dir}{os.pathsep}{inherited}" if inherited else str(lib_dir)
        )
    child_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# Python run at the top of every `run_json_with_fake_nvml` child: records every warning from
# any thread (`catch_warnings` swaps the process-wide hook) with no de-duplication, so tests
# can count warnings exactly, and defines `warned()` and `emit(value)`.
CHILD_PRELUDE = """\
import json
import warnings

_recorder = warnings.catch_warnings(record=True)
_caught = _recorder.__enter__()
warnings.simplefilter("always")


def warned():
    \"\"\"Messages of the MonitoringWarnings raised so far, in order.\"\"\"
    from tfthroughput.hardware.source import MonitoringWarning

    return [str(w.message) for w in _caught if issubclass(w.category, MonitoringWarning)]


def emit(value):
    print(json.dumps(value))
"""

_REPO_ROOT = Path(__file__).resolve().parents[2]


def run_json_with_fake_nvml(
    code: str,
    lib_dir: str | os.PathLike[str] | None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
):
    """Runs `CHILD_PRELUDE` + dedented `code` against the fake library; returns what it emits.

    The child imports `tfthroughput` from this checkout (its root goes first on `PYTHONPATH`)
    and must end by printing one JSON line, normally with `emit(...)`.

    Raises:
        AssertionError: If the child fails, with its stderr.
    """
    inherited = os.environ.get("PYTHONPATH")
    child_env = {
        "PYTHONPATH": f"{_REPO_ROOT}{os.pathsep}{inherited}" if inherited else str(_REPO_ROOT)
    }
    child_env.update(env or {})
    result = run_python_with_fake_nvml(
        CHILD_PRELUDE + textwrap.dedent(code), lib_dir, env=child_env, timeout=timeout
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
