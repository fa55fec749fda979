"""`hardware.host` and `hardware.discovery`: the host source (in process) and
`default_sources` (through the fake NVML library, in child processes)."""

from __future__ import annotations

import os
from collections import namedtuple

import psutil
import pytest
from fake_nvml import run_json_with_fake_nvml

from tfthroughput.hardware.host import HostSource
from tfthroughput.hardware.metrics import HOST_METRICS
from tfthroughput.hardware.source import Source

GIB = 1024**3
HOST_NAMES = {metric.name for metric in HOST_METRICS}


class _FakeProcess:
    """The two `psutil.Process` methods HostSource uses, with fixed answers."""

    def __init__(self, cpu_percent: float, rss: int) -> None:
        self._cpu_percent = cpu_percent
        self._rss = rss
        self.cpu_calls = 0

    def cpu_percent(self, interval=None):
        self.cpu_calls += 1
        return self._cpu_percent

    def memory_info(self):
        return namedtuple("pmem", "rss vms")(self._rss, 2 * self._rss)


def test_host_source_reports_every_host_metric_in_range():
    source = HostSource()
    assert isinstance(source, Source)
    assert source.name == "host"
    values = source.read()
    source.close()
    assert set(values) == HOST_NAMES
    assert all(isinstance(value, float) for value in values.values())
    assert 0.0 <= values["cpu_percent"] <= 100.0
    assert 0.0 <= values["ram_used_percent"] <= 100.0
    # percent of one core: up to 100 per core
    assert 0.0 <= values["process_cpu_percent"] <= 100.0 * (psutil.cpu_count() or 1)
    rss_gib = psutil.Process(os.getpid()).memory_info().rss / GIB
    assert 0.0 < values["process_rss_gib"] <= 2 * rss_gib


def test_host_source_watches_the_given_process_in_exact_units():
    process = _FakeProcess(cpu_percent=250.0, rss=3 * GIB // 2)
    source = HostSource(["process_cpu_percent", "process_rss_gib"], process=process)
    assert process.cpu_calls == 1  # primed, so the first sample covers one interval
    assert source.read() == {"process_cpu_percent": 250.0, "process_rss_gib": 1.5}
    assert process.cpu_calls == 2


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        (["cpu_percent"], {"cpu_percent"}),
        (["ram_used_percent", "utilization_percent"], {"ram_used_percent"}),
        (("power_watts",), set()),  # GPU names are not the host's business
        (frozenset(HOST_NAMES), HOST_NAMES),
    ],
)
def test_host_source_reports_only_the_selected_metrics(metrics, expected):
    assert set(HostSource(metrics).read()) == expected


# Lists default_sources' result: each source's name, device and first reading's keys.
_DEFAULT_SOURCES = """
import os
from tfthroughput.hardware.host import HostSource
from tfthroughput.hardware.discovery import default_sources

metrics = os.environ.get("METRICS")
sources = default_sources(None if metrics is None else metrics.split(","))
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
