"""`hardware.discovery`, the one place that finds GPUs: `default_sources` (the monitor),
`discover_sources` (quiet, for `diagnose`), `find_gpus` (`tfthroughput info`, the demo), through
the real pynvml and the fake NVML library in child processes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fake_nvml import run_json_with_fake_nvml

from tfthroughput.hardware.metrics import HOST_METRICS

HOST_NAMES = {metric.name for metric in HOST_METRICS}


# Lists default_sources' result: each source's name, device and first reading's keys.
_DEFAULT_SOURCES = """
import os
import time
from tfthroughput.hardware.host import MIN_CPU_SPAN_SECONDS
from tfthroughput.hardware.discovery import default_sources

metrics = os.environ.get("METRICS")
sources = default_sources(None if metrics is None else metrics.split(","))
time.sleep(MIN_CPU_SPAN_SECONDS)  # the host's CPU percentages need that span
listing = []
for source in sources:
    device = getattr(source, "device", None)
    listing.append([
        source.name,
        type(source).__name__,
        None if device is None else [device.nvml_index, device.uuid, device.name],
        sorted(source.read()),
    ])
    source.close()
lib = __import__("pynvml").nvmlLib
emit({
    "sources": listing,
    "warned": warned(),
    "inits": lib.fakeNvmlInitCount() if lib is not None else None,
})
"""

_GPU_KEYS = sorted(
    [
        "energy_joules",
        "memory_reserved_gib",
        "memory_used_gib",
        "memory_used_percent",
        "memory_utilization_percent",
        "power_watts",
        "sm_clock_mhz",
        "temperature_celsius",
        "utilization_percent",
    ]
)
_HOST = ["host", "HostSource", None, sorted(HOST_NAMES)]


def _gpu(tf_index: int, nvml_index: int, keys=_GPU_KEYS) -> list:
    uuid = f"GPU-00000000-0000-0000-0000-{nvml_index:012d}"
    return [f"gpu{tf_index}", "NVMLGPUSource", [nvml_index, uuid, f"Fake GPU {nvml_index}"], keys]


def test_default_sources_are_the_host_and_every_gpu(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _DEFAULT_SOURCES, fake_nvml_dir, env={"FAKE_NVML_DEVICE_COUNT": "3"}
    )
    assert out == {
        "sources": [_HOST, _gpu(0, 0), _gpu(1, 1), _gpu(2, 2)],
        "warned": [],
        "inits": 1,
    }


def test_default_sources_follow_cuda_visible_devices(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _DEFAULT_SOURCES,
        fake_nvml_dir,
        env={"FAKE_NVML_DEVICE_COUNT": "3", "CUDA_VISIBLE_DEVICES": "2,0"},
    )
    assert out["sources"] == [_HOST, _gpu(0, 2), _gpu(1, 0)]
    assert out["warned"] == []


@pytest.mark.parametrize(
    ("metrics", "sources", "inits"),
    [
        # no host metric asked for: no host source
        ("utilization_percent", [_gpu(0, 0, ["utilization_percent"])], 1),
        # no GPU metric asked for: NVML is not even initialised
        (
            "cpu_percent,process_rss_gib",
            [["host", "HostSource", None, ["cpu_percent", "process_rss_gib"]]],
            None,
        ),
        (
            "power_watts,ram_used_percent",
            [["host", "HostSource", None, ["ram_used_percent"]], _gpu(0, 0, ["power_watts"])],
            1,
        ),
    ],
)
def test_default_sources_honour_the_metric_selection(fake_nvml_dir, metrics, sources, inits):
    out = run_json_with_fake_nvml(
        _DEFAULT_SOURCES,
        fake_nvml_dir,
        env={"FAKE_NVML_DEVICE_COUNT": "1", "METRICS": metrics},
    )
    assert out == {"sources": sources, "warned": [], "inits": inits}


_HOST_STILL_LOGGED = "Host CPU/RAM metrics are still logged."


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        (
            {"FAKE_NVML_INIT_ERROR": "9"},
            "the NVIDIA driver is not loaded: check that `nvidia-smi` works, and that a "
            "container was started with GPU access",
        ),
        ({"TFTHROUGHPUT_DISABLE_NVML": "1"}, "NVML is switched off by TFTHROUGHPUT_DISABLE_NVML"),
        (
            {"FAKE_NVML_DEVICE_COUNT": "0"},
            "NVML found no GPU visible to this process (check CUDA_VISIBLE_DEVICES)",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": ""},  # set but empty: CUDA sees no GPU
            "NVML found no GPU visible to this process (check CUDA_VISIBLE_DEVICES)",
        ),
    ],
)
def test_without_usable_gpus_one_warning_and_the_host_alone(fake_nvml_dir, env, reason):
    out = run_json_with_fake_nvml(_DEFAULT_SOURCES, fake_nvml_dir, env=env)
    assert out["sources"] == [_HOST]
    assert out["warned"] == [f"GPU metrics are off: {reason}. {_HOST_STILL_LOGGED}"]


def test_a_gpu_lost_before_sampling_is_skipped_and_the_others_kept(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _DEFAULT_SOURCES,
        fake_nvml_dir,
        env={"FAKE_NVML_DEVICE_COUNT": "3", "FAKE_NVML_LOST_INDEX": "1"},
    )
    assert out["sources"] == [_HOST, _gpu(0, 0), _gpu(2, 2)]
    assert out["warned"] == [
        "gpu1 (NVML index 1) is not sampled: NVML reports 'GPU is lost'; other devices continue"
    ]


def test_missing_library_warns_once_and_keeps_the_host(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        import pynvml

        def no_library(name, *args, **kwargs):
            raise OSError(f"{name}: cannot open shared object file")

        pynvml.CDLL = no_library
        from tfthroughput.hardware.discovery import default_sources

        first = [source.name for source in default_sources()]
        emit({"first": first, "second": [s.name for s in default_sources()], "warned": warned()})
        """,
        fake_nvml_dir,
    )
    message = (
        "GPU metrics are off: the NVML library (libnvidia-ml.so.1) was not found: no NVIDIA "
        "driver is installed here, or its library directory is not on the loader path. "
        f"{_HOST_STILL_LOGGED}"
    )
    # once per call: each monitor says why its GPU charts are missing
    assert out == {"first": ["host"], "second": ["host"], "warned": [message, message]}


def test_warning_points_at_the_caller(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        from tfthroughput.hardware.source import MonitoringWarning
        from tfthroughput.hardware.discovery import default_sources

        default_sources()
        emit([[w.filename, w.category.__name__] for w in _caught
              if issubclass(w.category, MonitoringWarning)])
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_INIT_ERROR": "9"},
    )
    assert out == [["<string>", "MonitoringWarning"]]


# Every caller of discovery, in one child: what each reports when NVML answers, when the driver
# version query fails, and when listing the GPUs fails (pynvml's device count raising).
_EVERY_CALLER = """
import contextlib
import io
import pynvml
from tfthroughput import cli, demo
from tfthroughput.hardware.discovery import discover_sources, find_gpus
from tfthroughput.hardware.utilization import gpu_utilization


def report():
    gpus = find_gpus()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        cli.main(["info"])
    info = [line for line in printed.getvalue().splitlines() if "NVML" in line or "gpu" in line]
    discovery = discover_sources(["utilization_percent"])
    with gpu_utilization(0.05) as mean_utilization:
        pass
    for source in discovery.sources:
        source.close()
    return {
        "find_gpus": [[d.index for d in gpus.devices], gpus.driver_version, gpus.reason],
        "info": info,
        "demo": demo.gpu_status(),
        "discover_sources": [[s.name for s in discovery.sources], discovery.gpus_off],
        "gpu_utilization": mean_utilization(),
    }


answering = report()


def count_fails():
    raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)


pynvml.nvmlDeviceGetCount = count_fails
emit({"answering": answering, "listing_fails": report(), "warned": warned()})
"""


def test_info_the_demo_and_diagnose_see_what_discovery_sees_never_an_nvml_error(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _EVERY_CALLER,
        fake_nvml_dir,
        env={"FAKE_NVML_UNSUPPORTED": "nvmlSystemGetDriverVersion"},
        timeout=120,  # imports TensorFlow for `info` and the demo
    )
    assert out["answering"] == {
        "find_gpus": [[0, 1], "unknown", None],
        "info": [
            "NVML: driver unknown, 2 GPU(s) visible to this process",
            "  gpu0: Fake GPU 0 (GPU-00000000-0000-0000-0000-000000000000)",
            "  gpu1: Fake GPU 1 (GPU-00000000-0000-0000-0000-000000000001)",
        ],
        "demo": "gpu0: Fake GPU 0, gpu1: Fake GPU 1",
        "discover_sources": [["gpu0", "gpu1"], None],
        "gpu_utilization": 40.5,  # the fake GPUs report 40 % and 41 %
    }
    reason = "NVML could not list the GPUs ('Unknown Error')"
    assert out["listing_fails"] == {
        "find_gpus": [[], "unknown", reason],
        "info": [f"NVML: driver unknown; {reason}"],
        "demo": f"off ({reason}); host CPU/RAM are still monitored",
        "discover_sources": [[], reason],
        "gpu_utilization": None,
    }
    assert out["warned"] == []  # discovery itself never warns; default_sources does


def test_without_nvml_every_caller_gets_the_same_reason(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        from tfthroughput.hardware.discovery import default_sources, discover_sources, find_gpus

        gpus = find_gpus()
        discovery = discover_sources()
        default_sources()
        emit({
            "find_gpus": [list(gpus.devices), gpus.driver_version, gpus.reason],
            "discover_sources": [[s.name for s in discovery.sources], discovery.gpus_off],
            "warned": warned(),
        })
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_INIT_ERROR": "9"},
    )
    reason = (
        "the NVIDIA driver is not loaded: check that `nvidia-smi` works, and that a "
        "container was started with GPU access"
    )
    assert out == {
        "find_gpus": [[], None, reason],
        "discover_sources": [["host"], reason],
        "warned": [f"GPU metrics are off: {reason}. {_HOST_STILL_LOGGED}"],
    }


def test_only_discovery_lists_gpus():
    """No other module of the package calls NVML's listing or device code directly."""
    package = Path(__file__).resolve().parents[1] / "tfthroughput"
    listing_names = {"visible_gpus", "nvml", "NVMLGPUSource", "driver_version"}
    allowed = {"hardware/discovery.py", "hardware/gpu_devices.py", "hardware/nvml_gpu_source.py"}
    offenders = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("tfthroughput.hardware.")
            ):
                used = listing_names & {alias.name for alias in node.names}
                offenders.extend(f"{relative}: {name}" for name in sorted(used))
    assert offenders == []
