"""`NVMLGPUSource` through the real pynvml bindings and the fake `libnvidia-ml.so.1`.

Each test runs in a child process (see `tests/fake_nvml`). The fake's values for NVML device
``i``: utilization 40 + i %, memory utilization 20 + i %, (1 + i) GiB used of 80 GiB and
512 MiB reserved by the driver (NVML's v1 query counts them as used), 150 + i W, 50 + i degC,
SM clock 1500 + i MHz; with GPM, SM activity 60 + i % and tensor activity 25 + i %.
"""

from __future__ import annotations

import pytest
from fake_nvml import run_json_with_fake_nvml

GPM_METRICS = ["sm_activity_percent", "tensor_activity_percent"]


def _expected(i: int) -> dict[str, float]:
    """Every non-GPM metric of NVML device `i`, in the units the source reports."""
    return {
        "utilization_percent": 40.0 + i,
        "memory_utilization_percent": 20.0 + i,
        "memory_used_gib": 1.0 + i,
        "memory_used_percent": 100.0 * (1 + i) / 80,  # 1.25, 2.5, 3.75, ...
        "memory_reserved_gib": 0.5,
        "power_watts": 150.0 + i,  # NVML reports milliwatts
        "energy_joules": "energy from counter",
        "temperature_celsius": 50.0 + i,
        "sm_clock_mhz": 1500.0 + i,
    }


# Builds one source per visible GPU (in TensorFlow's order) and reads each READS times.
_READ_ALL = """
import os
from tfthroughput.hardware.nvml import nvml
from tfthroughput.hardware.gpu_devices import visible_gpus
from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource
from tfthroughput.hardware.source import Increment

metrics = os.environ.get("METRICS")
sources = [
    NVMLGPUSource(nvml(), device, None if metrics is None else metrics.split(","))
    for device in visible_gpus(nvml())
]

def read(source):  # energy depends on the time between reads: only its origin is compared
    return {
        name: f"energy from {'counter' if value.counter else 'power'}"
        if isinstance(value, Increment) else value
        for name, value in source.read().items()
    }

reads = {s.name: [read(s) for _ in range(int(os.environ.get("READS", "1")))] for s in sources}
for source in sources:
    source.close()
lib = nvml().nvmlLib
emit({
    "reads": reads,
    "warned": warned(),
    "utilization_calls": [lib.fakeNvmlUtilizationCallCount(i) for i in range(4)],
})
"""


def test_every_metric_per_device_in_its_unit(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _READ_ALL, fake_nvml_dir, env={"FAKE_NVML_DEVICE_COUNT": "3", "READS": "2"}
    )
    assert out["reads"] == {f"gpu{i}": [_expected(i)] * 2 for i in range(3)}
    assert _expected(1)["memory_used_percent"] == 2.5
    assert out["warned"] == []  # GPM unsupported and not asked for: silent
    assert out["utilization_calls"] == [2, 2, 2, 0]


# TensorFlow numbers the GPUs in CUDA_VISIBLE_DEVICES order; tags follow that numbering.
_UUID = "GPU-00000000-0000-0000-0000-{:012d}".format


@pytest.mark.parametrize(
    ("visible", "nvml_indices"),
    [
        ("2", [2]),
        ("3,1", [3, 1]),  # reordered: /GPU:0 is NVML device 3
        (f"{_UUID(2)},{_UUID(0)}", [2, 0]),  # full UUIDs
        ("GPU-00000000-0000-0000-0000-000000000003,1", [3, 1]),  # UUID and index mixed
        ("GPU-00000000-0000-0000-0000-00000000000", []),  # prefix of all four: ambiguous
        ("0,9,1", [0]),  # CUDA drops everything from the first unknown entry
    ],
)
def test_cuda_visible_devices_selects_and_orders_the_tags(fake_nvml_dir, visible, nvml_indices):
    out = run_json_with_fake_nvml(
        _READ_ALL,
        fake_nvml_dir,
        env={"FAKE_NVML_DEVICE_COUNT": "4", "CUDA_VISIBLE_DEVICES": visible},
    )
    assert out["reads"] == {f"gpu{tf}": [_expected(i)] for tf, i in enumerate(nvml_indices)}


@pytest.mark.parametrize(("count", "nvml_indices"), [(11, [10, 0]), (12, [])])
def test_uuid_prefix_must_be_unique(fake_nvml_dir, count, nvml_indices):
    # "...-00000000001" (11 digits) begins device 10's UUID "...-000000000010" and, once there
    # are 12 devices, device 11's too: then it is ambiguous and CUDA's list ends there.
    out = run_json_with_fake_nvml(
        _READ_ALL,
        fake_nvml_dir,
        env={
            "FAKE_NVML_DEVICE_COUNT": str(count),
            "CUDA_VISIBLE_DEVICES": "GPU-00000000-0000-0000-0000-00000000001,0",
        },
    )
    assert out["reads"] == {f"gpu{tf}": [_expected(i)] for tf, i in enumerate(nvml_indices)}


@pytest.mark.parametrize(
    ("metrics", "reading", "utilization_calls"),
    [
        ("power_watts", {"power_watts": 150.0}, [0, 0, 0, 0]),
        ("utilization_percent", {"utilization_percent": 40.0}, [3, 0, 0, 0]),
        (
            "memory_used_percent,temperature_celsius,cpu_percent",  # host names are ignored
            {"memory_used_percent": 1.25, "temperature_celsius": 50.0},
            [0, 0, 0, 0],
        ),
    ],
)
def test_metric_selection_limits_the_nvml_calls(fake_nvml_dir, metrics, reading, utilization_calls):
    # Power is unsupported here, so a power query would warn: no warning means no call.
    out = run_json_with_fake_nvml(
        _READ_ALL,
        fake_nvml_dir,
        env={
            "FAKE_NVML_DEVICE_COUNT": "1",
            "METRICS": metrics,
            "READS": "3",
            "FAKE_NVML_UNSUPPORTED": "" if metrics == "power_watts" else "nvmlDeviceGetPowerUsage",
        },
    )
    assert out == {
        "reads": {"gpu0": [reading] * 3},
        "warned": [],
        "utilization_calls": utilization_calls,
    }


def test_unsupported_power_is_dropped_with_one_warning(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _READ_ALL,
        fake_nvml_dir,
        env={"READS": "20", "FAKE_NVML_UNSUPPORTED": "nvmlDeviceGetPowerUsage"},
    )
    without_power = [
        {k: v for k, v in _expected(i).items() if k != "power_watts"} for i in range(2)
    ]
    assert out["reads"] == {f"gpu{i}": [without_power[i]] * 20 for i in range(2)}
    assert out["warned"] == [
        f"gpu{i} (Fake GPU {i}): NVML does not support power_watts on this device; dropped, "
        "other metrics continue"
        for i in range(2)
    ]


def test_other_nvml_errors_skip_the_sample_and_warn_once_per_kind(fake_nvml_dir):
    # Shutting NVML down makes every query fail with "Uninitialized": not a reason to drop
    # the metrics for good, so they come back once NVML answers again.
    out = run_json_with_fake_nvml(
        """
        import pynvml
        from tfthroughput.hardware.nvml import nvml
        from tfthroughput.hardware.gpu_devices import visible_gpus
        from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource

        source = NVMLGPUSource(nvml(), visible_gpus(nvml())[0], ["utilization_percent",
                                                                 "power_watts"])
        reads = [source.read()]
        pynvml.nvmlShutdown()
        reads += [source.read() for _ in range(5)]
        pynvml.nvmlInit()
        reads.append(source.read())
        emit({"reads": reads, "warned": warned()})
        """,
        fake_nvml_dir,
    )
    both = {"utilization_percent": 40.0, "power_watts": 150.0}
    assert out == {
        "reads": [both] + [{}] * 5 + [both],
        "warned": [
            "gpu0: reading utilization_percent failed (Uninitialized); skipped this sample",
            "gpu0: reading power_watts failed (Uninitialized); skipped this sample",
        ],
    }


def test_lost_gpu_under_a_sampler_stops_that_gpu_only(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        import time
        from tfthroughput.hardware.nvml import nvml
        from tfthroughput.hardware.sampler import Sampler
        from tfthroughput.hardware.discovery import default_sources

        lib = nvml().nvmlLib
        # One NVML query per sample: the fake loses the GPU right after its 3rd utilization
        # call, and a later query in the same read would fail that whole (partial) sample.
        metrics = ["utilization_percent", "memory_utilization_percent"]
        sampler = Sampler(default_sources(metrics), 0.05)
        with sampler:
            deadline = time.monotonic() + 30
            while lib.fakeNvmlUtilizationCallCount(0) < 8 and time.monotonic() < deadline:
                time.sleep(0.02)
        stats = sampler.collect()
        emit({
            "counts": {"/".join(key): s.count for key, s in stats.items()},
            "means": {"/".join(key): s.mean for key, s in stats.items()},
            "calls": [lib.fakeNvmlUtilizationCallCount(i) for i in range(2)],
            "lost": sampler.lost,
            "names": sampler.source_names,
            "warned": warned(),
        })
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_LOST_INDEX": "1", "FAKE_NVML_LOST_AFTER": "3"},
    )
    gpu0_samples = out["calls"][0]
    assert gpu0_samples >= 8
    assert out["calls"][1] == 3
    assert out["counts"] == {
        "gpu0/memory_utilization_percent": gpu0_samples,
        "gpu0/utilization_percent": gpu0_samples,
        "gpu1/memory_utilization_percent": 3,
        "gpu1/utilization_percent": 3,
    }
    assert out["means"] == {
        "gpu0/memory_utilization_percent": 20.0,
        "gpu0/utilization_percent": 40.0,
        "gpu1/memory_utilization_percent": 21.0,
        "gpu1/utilization_percent": 41.0,
    }
    message = (
        "gpu1 (Fake GPU 1, GPU-00000000-0000-0000-0000-000000000001): NVML reports "
        "'GPU is lost'; it is no longer sampled, other devices continue"
    )
    assert out["lost"] == {"gpu1": message}
    assert out["names"] == ["gpu0"]
    assert out["warned"] == [message]


def test_gpm_activity_from_the_second_sample_on(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _READ_ALL, fake_nvml_dir, env={"FAKE_NVML_GPM_SUPPORTED": "1", "READS": "4"}
    )
    for i in range(2):
        gpm = {"sm_activity_percent": 60.0 + i, "tensor_activity_percent": 25.0 + i}
        assert out["reads"][f"gpu{i}"] == [_expected(i)] + [{**_expected(i), **gpm}] * 3
    assert out["warned"] == []


def test_gpm_alone_when_selected(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _READ_ALL,
        fake_nvml_dir,
        env={
            "FAKE_NVML_GPM_SUPPORTED": "1",
            "READS": "3",
            "METRICS": "tensor_activity_percent",
            "FAKE_NVML_DEVICE_COUNT": "1",
        },
    )
    assert out["reads"] == {
        "gpu0": [{}, {"tensor_activity_percent": 25.0}, {"tensor_activity_percent": 25.0}]
    }
    assert out["utilization_calls"] == [0, 0, 0, 0]
    assert out["warned"] == []


@pytest.mark.parametrize(
    ("metrics", "reading", "warned"),
    [
        (None, _expected(0), False),  # GPM is an extra: no word when it is missing
        ("utilization_percent", {"utilization_percent": 40.0}, False),
        ("sm_activity_percent,utilization_percent", {"utilization_percent": 40.0}, True),
    ],
)
def test_gpm_unsupported_warns_only_when_asked_for(fake_nvml_dir, metrics, reading, warned):
    env = {"FAKE_NVML_DEVICE_COUNT": "1", "READS": "3"}
    if metrics is not None:
        env["METRICS"] = metrics
    out = run_json_with_fake_nvml(_READ_ALL, fake_nvml_dir, env=env)
    assert out["reads"] == {"gpu0": [reading] * 3}
    message = (
        "gpu0 (Fake GPU 0): sm_activity_percent, tensor_activity_percent unavailable: the GPU "
        "does not support GPM (it needs Hopper or newer); dropped"
    )
    assert out["warned"] == ([message] if warned else [])


def test_concurrent_samples_are_serialised(fake_nvml_dir):
    # `GPUMonitor` calls `collect(sample_now=True)` on the training thread while the sampler
    # thread samples; GPM keeps state between samples, so two samples must not interleave.
    out = run_json_with_fake_nvml(
        """
        import sys
        import threading
        from tfthroughput.hardware.sampler import Sampler
        from tfthroughput.hardware.discovery import default_sources

        sys.setswitchinterval(1e-6)  # switch threads often, to give interleaving every chance
        sampler = Sampler(default_sources(["utilization_percent", "sm_activity_percent"]), 1.0)

        def sample_many():
            for _ in range(100):
                sampler.sample_once()

        threads = [threading.Thread(target=sample_many) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sampler.stop()
        stats = sampler.collect()
        emit({
            "stats": {"/".join(key): [s.count, s.min, s.max] for key, s in stats.items()},
            "warned": warned(),
        })
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_GPM_SUPPORTED": "1"},
    )
    assert out == {
        "stats": {
            "gpu0/sm_activity_percent": [399, 60.0, 60.0],
            "gpu0/utilization_percent": [400, 40.0, 40.0],
            "gpu1/sm_activity_percent": [399, 61.0, 61.0],
            "gpu1/utilization_percent": [400, 41.0, 41.0],
        },
        "warned": [],
    }


@pytest.mark.parametrize(
    ("v2_error", "code"),
    [
        ("NotSupported", "nvmlDeviceGetMemoryInfo_v2=3"),
        ("FunctionNotFound", "nvmlDeviceGetMemoryInfo_v2=13"),  # a driver without the symbol
        ("ArgumentVersionMismatch", "nvmlDeviceGetMemoryInfo_v2=25"),  # a driver with v1 only
    ],
)
def test_memory_falls_back_to_v1_quietly_where_v2_is_refused(fake_nvml_dir, v2_error, code):
    out = run_json_with_fake_nvml(
        _READ_ALL, fake_nvml_dir, env={"READS": "3", "FAKE_NVML_ERRORS": code}
    )
    for i in range(2):
        v1 = {k: v for k, v in _expected(i).items() if k != "memory_reserved_gib"}
        v1["memory_used_gib"] = 1.5 + i  # v1 counts the driver's 512 MiB as used
        v1["memory_used_percent"] = 100.0 * (1.5 + i) / 80
        assert out["reads"][f"gpu{i}"] == [v1] * 3, v2_error
    assert out["warned"] == []


def test_reserved_memory_asked_for_but_unavailable_warns_once(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _READ_ALL,
        fake_nvml_dir,
        env={
            "READS": "3",
            "FAKE_NVML_DEVICE_COUNT": "1",
            "METRICS": "memory_reserved_gib,memory_used_gib",
            "FAKE_NVML_UNSUPPORTED": "nvmlDeviceGetMemoryInfo_v2",
        },
    )
    assert out["reads"] == {"gpu0": [{"memory_used_gib": 1.5}] * 3}
    assert out["warned"] == [
        "gpu0 (Fake GPU 0): memory_reserved_gib unavailable: the driver has no v2 memory query "
        "(Not Supported); dropped"
    ]


def test_other_v2_memory_errors_are_not_mistaken_for_a_v1_driver(fake_nvml_dir):
    # "Unknown error" is a failed read, not a missing query: skipped, v2 kept for later reads.
    out = run_json_with_fake_nvml(
        """
        import os
        from tfthroughput.hardware.nvml import nvml
        from tfthroughput.hardware.gpu_devices import visible_gpus
        from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource

        source = NVMLGPUSource(nvml(), visible_gpus(nvml())[0], ["memory_used_gib"])
        emit({"reads": [source.read() for _ in range(2)], "warned": warned()})
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_ERRORS": "nvmlDeviceGetMemoryInfo_v2=999", "FAKE_NVML_DEVICE_COUNT": "1"},
    )
    assert out == {
        "reads": [{}, {}],
        "warned": ["gpu0: reading memory_used_gib failed (Unknown Error); skipped this sample"],
    }


def test_reading_a_closed_source_says_so(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        from tfthroughput.hardware.nvml import nvml
        from tfthroughput.hardware.gpu_devices import visible_gpus
        from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource

        source = NVMLGPUSource(nvml(), visible_gpus(nvml())[1], None)
        source.read()
        source.close()
        try:
            source.read()
        except Exception as error:
            emit([type(error).__name__, str(error)])
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_GPM_SUPPORTED": "1"},  # GPM buffers are released by close()
    )
    assert out == [
        "RuntimeError",
        "gpu1 (Fake GPU 1) was closed; create a new source to read it",
    ]


# NVML's sample buffers. The fake's buffers (see tests/fake_nvml/fake_nvml.c) hold sample k at
# origin + k * period on the wall clock, with the value script[k % length]; a child sleeps
# until chosen moments half a period away from any sample, so where each sample belongs is
# certain.
_SLEEP_UNTIL = """
import ctypes
import time
import pynvml
from tfthroughput.hardware.nvml import nvml

nvml()
pynvml.nvmlLib.fakeNvmlSamplesOrigin.restype = ctypes.c_ulonglong
ORIGIN = pynvml.nvmlLib.fakeNvmlSamplesOrigin() / 1e6
late = []

def sleep_until(since_origin, slack):
    delay = ORIGIN + since_origin - time.time()
    if delay < -slack:
        late.append(since_origin)
    time.sleep(max(delay, 0.0))
"""


def test_a_buffered_source_reports_each_driver_sample_once(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _SLEEP_UNTIL
        + """
from tfthroughput.hardware.gpu_devices import visible_gpus
from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource

source = NVMLGPUSource(nvml(), visible_gpus(nvml())[0], None)
reads = []
for moment in (0.15, 0.45, 0.55, 1.05):  # period 0.2 s: samples at 0, 0.2, 0.4, ...
    sleep_until(moment, 0.05)
    reading = source.read()
    reads.append({  # timed samples as [values oldest first, fallback]; energy tested apart
        name: [[v for _, v in value.samples], value.fallback]
        if isinstance(value, tuple) else value
        for name, value in reading.items() if name != "energy_joules"
    })
emit({"reads": reads, "late": late, "warned": warned()})
""",
        fake_nvml_dir,
        env={
            "FAKE_NVML_DEVICE_COUNT": "1",
            "FAKE_NVML_SAMPLES_GPU": "1,2,3,4,5",
            "FAKE_NVML_SAMPLES_POWER": "100000,300000",  # milliwatts
            "FAKE_NVML_UTILIZATION_GPU": "0",
        },
    )
    assert out["late"] == []
    point = {k: v for k, v in _expected(0).items() if k != "utilization_percent"}
    del point["power_watts"], point["energy_joules"]
    # Samples 0 | 1, 2 | nothing new at 0.55: the point reading as fallback | 3, 4, 5
    util = [[[1.0], None], [[2.0, 3.0], None], [[], 0.0], [[4.0, 5.0, 1.0], None]]
    power = [[[100.0], None], [[300.0, 100.0], None], [[], 150.0], [[300.0, 100.0, 300.0], None]]
    assert out["reads"] == [
        {**point, "utilization_percent": u, "power_watts": p}
        for u, p in zip(util, power, strict=True)
    ]
    assert out["warned"] == []  # memory utilization has no buffer here: point reading, quietly


def test_window_boundaries_split_buffer_samples_by_their_timestamps(fake_nvml_dir):
    # Period 0.3 s, values 10, 20, 30, ... (sample k has 10 * (k + 1)). The window opens at
    # 0.45; a read at 1.35 files samples 2-4; the cut at 1.95 closes it; samples 5 and 6
    # (1.5, 1.8) are read only after the cut and belong to the closed window: dropped; the
    # read at 3.15, when the second window is collected, files samples 7-10.
    out = run_json_with_fake_nvml(
        _SLEEP_UNTIL
        + """
from tfthroughput.hardware.discovery import default_sources
from tfthroughput.hardware.sampler import Sampler

sources = default_sources(["utilization_percent"])
sleep_until(0.45, 0.1)
sampler = Sampler(sources, 1.0)
sleep_until(1.35, 0.1)
sampler.sample_once()
sleep_until(1.95, 0.1)
first = sampler.collect()
sleep_until(3.15, 0.1)
second = sampler.collect(sample_now=True)
emit({
    "windows": [
        {"/".join(k): [s.count, s.mean, s.min, s.max] for k, s in w.items()}
        for w in (first, second)
    ],
    "buffer_samples": [{"/".join(k): n for k, n in w.buffer_samples.items()}
                       for w in (first, second)],
    "late": late,
})
""",
        fake_nvml_dir,
        env={
            "FAKE_NVML_DEVICE_COUNT": "1",
            "FAKE_NVML_SAMPLES_GPU": ",".join(str(10 * (k + 1)) for k in range(12)),
            "FAKE_NVML_SAMPLES_PERIOD_MS": "300",
        },
    )
    assert out["late"] == []
    assert out["windows"] == [
        {"gpu0/utilization_percent": [3, 40.0, 30.0, 50.0]},
        {"gpu0/utilization_percent": [4, 95.0, 80.0, 110.0]},
    ]
    assert out["buffer_samples"] == [
        {"gpu0/utilization_percent": 3},
        {"gpu0/utilization_percent": 4},
    ]


def test_lost_gpu_with_buffers_stops_that_gpu_only(fake_nvml_dir):
    # As without buffers: the fake loses GPU 1 after it answered 3 GPU-Util buffer reads.
    out = run_json_with_fake_nvml(
        """
        import time
        from tfthroughput.hardware.discovery import default_sources
        from tfthroughput.hardware.sampler import Sampler
        import pynvml

        sampler = Sampler(default_sources(["utilization_percent", "power_watts"]), 1.0)
        time.sleep(0.25)  # a sample newer than the window's start, in each buffer
        for _ in range(6):
            sampler.sample_once()
        stats = sampler.collect()
        emit({
            "means": {"/".join(key): s.mean for key, s in stats.items()},
            "calls": [pynvml.nvmlLib.fakeNvmlUtilizationCallCount(i) for i in range(2)],
            "names": sampler.source_names,
            "warned": warned(),
        })
        """,
        fake_nvml_dir,
        env={
            "FAKE_NVML_LOST_INDEX": "1",
            "FAKE_NVML_LOST_AFTER": "3",
            "FAKE_NVML_SAMPLES_GPU": "50",
            "FAKE_NVML_SAMPLES_POWER": "200000",
        },
    )
    # GPU 1's reads: samples (1 GPU-Util read); nothing new, so a point fallback (2, 3) and
    # the power fallback finds it lost: that read is dropped. What came before is kept.
    calls = out.pop("calls")
    assert calls[0] >= 6 and calls[1] == 3
    assert out == {
        "means": {
            "gpu0/power_watts": 200.0,
            "gpu0/utilization_percent": 50.0,
            "gpu1/power_watts": 200.0,
            "gpu1/utilization_percent": 50.0,
        },
        "names": ["gpu0"],
        "warned": [
            "gpu1 (Fake GPU 1, GPU-00000000-0000-0000-0000-000000000001): NVML reports "
            "'GPU is lost'; it is no longer sampled, other devices continue"
        ],
    }


# Energy: reads of GPU 0, an `energy_joules` Increment as [joules, from the counter]. The
# source reads the counter once when it starts: the first value of a script is that reading.
_ENERGY = """
import os
import time
from tfthroughput.hardware.nvml import nvml
from tfthroughput.hardware.gpu_devices import visible_gpus
from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource
from tfthroughput.hardware.source import Increment

source = NVMLGPUSource(nvml(), visible_gpus(nvml())[0], os.environ["METRICS"].split(","))
reads = []
for _ in range(int(os.environ.get("READS", "5"))):
    reading = source.read()
    reads.append({
        name: [round(value.amount, 6), value.counter] if isinstance(value, Increment)
        else value if isinstance(value, float) else "timed"
        for name, value in reading.items()
    })
    time.sleep(float(os.environ.get("PAUSE", "0")))
emit({"reads": reads, "warned": warned()})
"""


def test_energy_from_a_scripted_counter_across_a_restart(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _ENERGY,
        fake_nvml_dir,
        env={
            "METRICS": "energy_joules",
            "FAKE_NVML_ENERGY": "1000000,1100000,1300000,200000,500000",  # mJ; restart at 4th
        },
    )
    # 1.0e6 when the source starts, then +100 J, +200 J, restart: +200 J, +300 J, unchanged
    joules = [100.0, 200.0, 200.0, 300.0, 0.0]
    assert out == {"reads": [{"energy_joules": [j, True]} for j in joules], "warned": []}


def test_energy_without_the_counter_integrates_point_power_quietly(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _ENERGY,
        fake_nvml_dir,
        env={
            "METRICS": "energy_joules",  # power not asked for: read for energy all the same
            "READS": "3",
            "PAUSE": "0.25",
            "FAKE_NVML_UNSUPPORTED": "nvmlDeviceGetTotalEnergyConsumption",
        },
    )
    joules = [read["energy_joules"][0] for read in out["reads"]]
    assert [read["energy_joules"][1] for read in out["reads"]] == [False] * 3
    # 150 W from the start (a power reading then) to the first read, then for ~0.25 s
    # between reads (sleeps overshoot, never undershoot)
    assert 0.0 < joules[0] < 150 * 0.1
    assert all(150 * 0.25 <= j <= 150 * 0.4 for j in joules[1:]), joules
    assert out["warned"] == []


def test_energy_without_the_counter_integrates_the_power_buffer(fake_nvml_dir):
    # Power samples every 200 ms alternating 100 and 300 W: 200 W on average, 40 J per period.
    out = run_json_with_fake_nvml(
        _SLEEP_UNTIL
        + """
from tfthroughput.hardware.gpu_devices import visible_gpus
from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource

sleep_until(0.1, 0.05)  # the source starts with sample 0 in the buffer
source = NVMLGPUSource(nvml(), visible_gpus(nvml())[0], ["energy_joules", "power_watts"])
increments = []
for moment in (0.5, 1.3):
    sleep_until(moment, 0.05)
    energy = source.read()["energy_joules"]
    increments.append([energy.amount, energy.seconds, energy.counter])
emit({"increments": increments, "late": late, "warned": warned()})
""",
        fake_nvml_dir,
        env={
            "FAKE_NVML_DEVICE_COUNT": "1",
            "FAKE_NVML_SAMPLES_POWER": "100000,300000",
            "FAKE_NVML_UNSUPPORTED": "nvmlDeviceGetTotalEnergyConsumption",
        },
    )
    assert out["late"] == [] and out["warned"] == []
    # samples 0 (at the start) | 0.2, 0.4 | 0.6 ... 1.2: trapezoids at the samples' times,
    # placed through each read's clock readings. Those are microseconds apart on a quiet
    # machine, but a clean-clone CI run measured 0.8010 s for the second span (160.19 J): the
    # slack allows 10 ms between a read's clock readings (2 J at 200 W). A wrong integration
    # (point power, or a period missed) is off by tens of joules.
    assert out["increments"] == [
        [pytest.approx(80.0, abs=2.0), pytest.approx(0.4, abs=0.01), False],
        [pytest.approx(160.0, abs=2.0), pytest.approx(0.8, abs=0.01), False],
    ]


def test_energy_is_dropped_with_power_where_neither_is_supported(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _ENERGY,
        fake_nvml_dir,
        env={
            "METRICS": "energy_joules,power_watts,temperature_celsius",
            "READS": "3",
            "FAKE_NVML_UNSUPPORTED": (
                "nvmlDeviceGetTotalEnergyConsumption,nvmlDeviceGetPowerUsage"
            ),
        },
    )
    assert out == {
        "reads": [{"temperature_celsius": 50.0}] * 3,
        "warned": [
            "gpu0 (Fake GPU 0): NVML does not support power_watts, energy_joules on this "
            "device; dropped, other metrics continue"
        ],
    }


def test_sampler_windows_add_up_the_counters_increments(fake_nvml_dir):
    # The counter is read when the source starts (1.0e6 mJ), then at 1, 2, 3, 4, 5 on the
    # sampler's clock: +100, +200, +200 (after a restart), +300, +0 J. Windows cut at 2.5,
    # 4 (with a reading then) and 5.5.
    out = run_json_with_fake_nvml(
        """
        from tfthroughput.hardware.discovery import default_sources
        from tfthroughput.hardware.sampler import Sampler

        class Clock:
            now = 0.0
            def __call__(self):
                return self.now

        clock = Clock()
        sampler = Sampler(default_sources(["energy_joules"]), 1.0, clock=clock)
        windows = []
        for moment, action in [(1, "read"), (2, "read"), (2.5, "cut"), (3, "read"),
                               (4, "read and cut"), (5, "read"), (5.5, "cut")]:
            clock.now = moment
            if action == "read":
                sampler.sample_once()
            else:
                window = sampler.collect(sample_now=action == "read and cut")
                windows.append({"/".join(k): list(t) for k, t in window.totals.items()})
        emit(windows)
        """,
        fake_nvml_dir,
        env={
            "FAKE_NVML_ENERGY": "1000000,1100000,1300000,200000,500000",
            "FAKE_NVML_DEVICE_COUNT": "1",
        },
    )
    assert out == [
        {"gpu0/energy_joules": [300.0, True]},
        {"gpu0/energy_joules": [500.0, True]},
        {"gpu0/energy_joules": [0.0, True]},
    ]


# This process's memory: the fake lists FAKE_NVML_PROCESSES on every device ("self" is the
# child), each with 256 * i MiB more on device i (64 * j on MIG device j).
@pytest.mark.parametrize(
    ("processes", "env", "expected"),
    [
        ("self:1536,4242:512", {}, [1.5, 1.75]),  # only this PID's entry counts
        ("self:1024,self:512", {}, [1.5, 2.0]),  # listed twice (e.g. two contexts): summed
        ("4242:512", {}, [None, None]),  # not listed: no value, no warning
        (
            "self:1536",  # bindings' v3 missing in the driver: the v2 list answers
            {"FAKE_NVML_ERRORS": "nvmlDeviceGetComputeRunningProcesses_v3=13"},
            [1.5, 1.75],
        ),
    ],
)
def test_process_memory_is_this_processs_entry(fake_nvml_dir, processes, env, expected):
    out = run_json_with_fake_nvml(
        _READ_ALL,
        fake_nvml_dir,
        env={
            "METRICS": "process_memory_used_gib,memory_used_gib",
            "READS": "2",
            "FAKE_NVML_PROCESSES": processes,
            **env,
        },
    )
    for i, gib in enumerate(expected):
        reading = {"memory_used_gib": 1.0 + i}
        if gib is not None:
            reading["process_memory_used_gib"] = gib
        assert out["reads"][f"gpu{i}"] == [reading] * 2
    assert out["warned"] == []


def test_process_memory_unsupported_is_dropped_once(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _READ_ALL,
        fake_nvml_dir,
        env={
            "METRICS": "process_memory_used_gib,temperature_celsius",
            "READS": "3",
            "FAKE_NVML_DEVICE_COUNT": "1",
            "FAKE_NVML_PROCESSES": "self:1024",
            "FAKE_NVML_UNSUPPORTED": "nvmlDeviceGetComputeRunningProcesses_v3",
        },
    )
    assert out["reads"] == {"gpu0": [{"temperature_celsius": 50.0}] * 3}
    assert out["warned"] == [
        "gpu0 (Fake GPU 0): NVML does not support process_memory_used_gib on this device; "
        "dropped, other metrics continue"
    ]


_MIG_UUID = "MIG-00000000-0000-0000-{:04d}-{:012d}".format


def test_a_mig_slice_in_cuda_visible_devices_is_sampled_through_its_own_handle(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        """
        from dataclasses import astuple
        from tfthroughput.hardware.nvml import nvml
        from tfthroughput.hardware.gpu_devices import visible_gpus
        from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource

        sources = [NVMLGPUSource(nvml(), device) for device in visible_gpus(nvml())]
        reads = {s.name: [s.read() for _ in range(3)] for s in sources}
        emit({
            "devices": [astuple(s.device) for s in sources],
            "reads": {name: [{k: v for k, v in r.items() if k != "energy_joules"} for r in rs]
                      for name, rs in reads.items()},
            "warned": warned(),
        })
        """,
        fake_nvml_dir,
        env={
            "FAKE_NVML_MIG": "0:2",
            "FAKE_NVML_PROCESSES": "self:1536",
            "CUDA_VISIBLE_DEVICES": f"{_MIG_UUID(0, 1)},1",
        },
    )
    assert out["devices"] == [
        [0, 0, _MIG_UUID(0, 1), "Fake GPU 0 MIG 1", 1],
        [1, 1, "GPU-00000000-0000-0000-0000-000000000001", "Fake GPU 1", None],
    ]
    # The slice: its own memory (2 * 256 MiB of 10 GiB, nothing reserved), this process's
    # 1536 + 64 MiB; the rest a MIG slice cannot report, dropped with one warning.
    assert (
        out["reads"]["gpu0"]
        == [
            {
                "memory_used_gib": 0.5,
                "memory_used_percent": 5.0,
                "memory_reserved_gib": 0.0,
                "process_memory_used_gib": 1.5625,
            }
        ]
        * 3
    )
    whole_gpu = {k: v for k, v in _expected(1).items() if k != "energy_joules"}
    assert out["reads"]["gpu1"] == [{**whole_gpu, "process_memory_used_gib": 1.75}] * 3
    assert out["warned"] == [
        "gpu0 (Fake GPU 0 MIG 1): NVML does not support utilization_percent, "
        "memory_utilization_percent, power_watts, energy_joules, temperature_celsius, "
        "sm_clock_mhz on this device; dropped, other metrics continue"
    ]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (f"{_MIG_UUID(1, 0)}", ["Fake GPU 1 MIG 0"]),
        ("MIG-00000000-0000-0000-0001", []),  # a prefix of both of GPU 1's slices
        ("MIG-00000000-0000-0000-0001-000000000002", []),  # no such slice: CUDA stops there
        ("0,1", ["Fake GPU 0", "Fake GPU 1"]),  # whole GPUs: MIG is not even looked at
    ],
)
def test_mig_entries_follow_cudas_rules(fake_nvml_dir, visible, expected):
    out = run_json_with_fake_nvml(
        """
        from tfthroughput.hardware.nvml import nvml
        from tfthroughput.hardware.gpu_devices import visible_gpus

        emit([device.name for device in visible_gpus(nvml())])
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_MIG": "1:2", "CUDA_VISIBLE_DEVICES": visible},
    )
    assert out == expected
