"""`tfthroughput.hardware.nvml`: one NVML init per process, failures explained, the off switch.

Each test runs in a child process against the fake `libnvidia-ml.so.1` (see
`tests/fake_nvml`), because NVML state is per process and the library is chosen at load time.
"""

from __future__ import annotations

import pytest
from fake_nvml import run_json_with_fake_nvml


def test_nvml_is_initialised_once_per_process(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        import threading
        import pynvml
        from tfthroughput.hardware.nvml import nvml
        from tfthroughput.hardware.gpu_devices import visible_gpus
        from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource
        from tfthroughput.hardware.sampler import Sampler
        from tfthroughput.hardware.discovery import default_sources

        lib = pynvml.nvmlLib  # not loaded before the first init
        results = []
        threads = [threading.Thread(target=lambda: results.append(nvml())) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        lists = [default_sources() for _ in range(3)]
        extra = [NVMLGPUSource(nvml(), device) for device in visible_gpus(nvml())]
        samplers = [Sampler(sources, interval=0.05) for sources in lists + [extra]]
        for sampler in samplers:
            sampler.sample_once()
            sampler.stop()
        emit({
            "lib_before": lib is None,
            "all_pynvml": all(module is pynvml for module in results + [nvml()]),
            "inits": pynvml.nvmlLib.fakeNvmlInitCount(),
            "shutdowns": pynvml.nvmlLib.fakeNvmlShutdownCount(),
            "names": [sampler.source_names for sampler in samplers],
            "warned": warned(),
        })
        """,
        fake_nvml_dir,
    )
    assert out == {
        "lib_before": True,
        "all_pynvml": True,
        "inits": 1,
        "shutdowns": 0,  # never shut down while the process may still sample
        "names": [["host", "gpu0", "gpu1"]] * 3 + [["gpu0", "gpu1"]],
        "warned": [],
    }


def test_importing_the_sampler_core_does_not_touch_nvml(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        import ctypes
        import sys
        import tfthroughput
        import tfthroughput.hardware.nvml, tfthroughput.hardware.gpu_devices
        import tfthroughput.hardware.nvml_gpu_source
        import tfthroughput.hardware.sampler, tfthroughput.hardware.discovery

        pynvml_imported = "pynvml" in sys.modules
        lib = ctypes.CDLL("libnvidia-ml.so.1")  # the fake, as pynvml would load it
        emit({"pynvml_imported": pynvml_imported, "inits": lib.fakeNvmlInitCount()})
        """,
        fake_nvml_dir,
    )
    assert out == {"pynvml_imported": False, "inits": 0}


# Calls nvml() twice; the first failure is remembered, so the second call raises the same
# message without a second attempt even though the cause is gone by then.
_FAIL_TWICE = """
import os
import pynvml
from tfthroughput.hardware.nvml import NVMLUnavailable, nvml

messages = []
for attempt in range(2):
    try:
        nvml()
        messages.append(None)
    except NVMLUnavailable as error:
        messages.append(str(error))
    os.environ.pop("FAKE_NVML_INIT_ERROR", None)  # a retry would now succeed
emit({
    "messages": messages,
    "inits": pynvml.nvmlLib.fakeNvmlInitCount() if pynvml.nvmlLib else None,
})
"""


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            9,
            "the NVIDIA driver is not loaded: check that `nvidia-smi` works, and that a "
            "container was started with GPU access",
        ),
        (4, "NVML refused access (no permission to the GPU device files)"),
        (999, "NVML failed to initialise: Unknown Error"),
    ],
)
def test_init_failure_is_explained_and_remembered(fake_nvml_dir, code, message):
    out = run_json_with_fake_nvml(
        _FAIL_TWICE, fake_nvml_dir, env={"FAKE_NVML_INIT_ERROR": str(code)}
    )
    assert out == {"messages": [message, message], "inits": 0}


def test_missing_library_is_explained(fake_nvml_dir):
    # pynvml loads the library with ctypes' CDLL, imported into its namespace; making that
    # fail is what a machine without the NVIDIA driver looks like, on any machine.
    out = run_json_with_fake_nvml(
        """
        import pynvml

        def no_library(name, *args, **kwargs):
            raise OSError(f"{name}: cannot open shared object file")

        pynvml.CDLL = no_library
        from tfthroughput.hardware.nvml import NVMLUnavailable, nvml

        try:
            nvml()
        except NVMLUnavailable as error:
            emit(str(error))
        """,
        fake_nvml_dir,
    )
    assert out == (
        "the NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed "
        "here, or its library directory is not on the loader path"
    )


def test_missing_pynvml_is_explained(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        import sys

        sys.modules["pynvml"] = None  # makes `import pynvml` raise ImportError
        from tfthroughput.hardware.nvml import NVMLUnavailable, nvml

        try:
            nvml()
        except NVMLUnavailable as error:
            emit(str(error))
        """,
        fake_nvml_dir,
    )
    assert out.startswith(
        "the `pynvml` module is missing: install it with `pip install nvidia-ml-py` ("
    )


def test_disable_switch_is_read_at_each_call(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        import os
        import sys
        from tfthroughput.hardware.nvml import NVMLUnavailable, nvml

        try:
            nvml()
        except NVMLUnavailable as error:
            message = str(error)
        pynvml_imported = "pynvml" in sys.modules
        del os.environ["TFTHROUGHPUT_DISABLE_NVML"]  # switched off, not failed: not remembered
        pynvml = nvml()
        emit({
            "message": message,
            "pynvml_imported": pynvml_imported,
            "inits": pynvml.nvmlLib.fakeNvmlInitCount(),
        })
        """,
        fake_nvml_dir,
        env={"TFTHROUGHPUT_DISABLE_NVML": "1"},
    )
    assert out == {
        "message": "NVML is switched off by TFTHROUGHPUT_DISABLE_NVML",
        "pynvml_imported": False,
        "inits": 1,
    }
