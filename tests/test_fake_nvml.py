"""The fake NVML library, driven through the real pynvml bindings in child processes."""

from __future__ import annotations

import ctypes
import json
import textwrap

import pytest
from fake_nvml import run_python_with_fake_nvml

GIB = 1024**3


def _run_json(code: str, lib_dir, env: dict[str, str] | None = None):
    """Runs `code` against the fake library and returns the JSON it prints last."""
    result = run_python_with_fake_nvml(textwrap.dedent(code), lib_dir, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# Prints, for every device, every value the fake reports through the pynvml Python functions.
_ALL_VALUES = """
import json
import pynvml

pynvml.nvmlInit()
out = {
    "count": pynvml.nvmlDeviceGetCount(),
    "driver": pynvml.nvmlSystemGetDriverVersion(),
    "nvml": pynvml.nvmlSystemGetNVMLVersion(),
    "devices": [],
}
for i in range(out["count"]):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    mem2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    out["devices"].append({
        "index": pynvml.nvmlDeviceGetIndex(h),
        "uuid": uuid,
        "index_by_uuid": pynvml.nvmlDeviceGetIndex(by_uuid),
        "name": pynvml.nvmlDeviceGetName(h),
        "util": [util.gpu, util.memory],
        "mem": [mem.total, mem.used, mem.free],
        "mem_v2": [mem2.total, mem2.reserved, mem2.used, mem2.free],
        "power_mw": pynvml.nvmlDeviceGetPowerUsage(h),
        "temp_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "clocks": [
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_GRAPHICS),
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_VIDEO),
        ],
        "cc": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
        "gpm": pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice,
    })
pynvml.nvmlShutdown()
print(json.dumps(out))
"""


def _expected_device(i: int) -> dict:
    return {
        "index": i,
        "uuid": f"GPU-00000000-0000-0000-0000-{i:012d}",
        "index_by_uuid": i,
        "name": f"Fake GPU {i}",
        "util": [40 + i, 20 + i],
        # v1 counts the driver's 512 MiB reserve as used; v2 reports it apart
        "mem": [80 * GIB, (1 + i) * GIB + GIB // 2, 80 * GIB - (1 + i) * GIB - GIB // 2],
        "mem_v2": [80 * GIB, GIB // 2, (1 + i) * GIB, 80 * GIB - (1 + i) * GIB - GIB // 2],
        "power_mw": 150000 + 1000 * i,
        "temp_c": 50 + i,
        "clocks": [1500 + i, 1500 + i, 2600 + i, 1300 + i],
        "cc": [9, 0],
        "gpm": 0,
    }


def test_default_values_through_pynvml(fake_nvml_dir):
    assert _run_json(_ALL_VALUES, fake_nvml_dir) == {
        "count": 2,
        "driver": "550.00.fake",
        "nvml": "12.550.00.fake",
        "devices": [_expected_device(0), _expected_device(1)],
    }


@pytest.mark.parametrize("count", [0, 1, 12])
def test_device_count_from_env(fake_nvml_dir, count):
    out = _run_json(_ALL_VALUES, fake_nvml_dir, env={"FAKE_NVML_DEVICE_COUNT": str(count)})
    assert out["count"] == count
    assert out["devices"] == [_expected_device(i) for i in range(count)]


def test_bad_handle_index_and_uuid(fake_nvml_dir):
    out = _run_json(
        """
        import json
        import pynvml

        pynvml.nvmlInit()
        errors = []
        for call in (
            lambda: pynvml.nvmlDeviceGetHandleByIndex(2),
            lambda: pynvml.nvmlDeviceGetHandleByUUID("GPU-not-there"),
            lambda: pynvml.nvmlDeviceGetTemperature(pynvml.nvmlDeviceGetHandleByIndex(0), 7),
        ):
            try:
                call()
            except pynvml.NVMLError as e:
                errors.append(type(e).__name__)
        print(json.dumps(errors))
        """,
        fake_nvml_dir,
    )
    assert out == ["NVMLError_InvalidArgument", "NVMLError_NotFound", "NVMLError_InvalidArgument"]


@pytest.mark.parametrize(
    ("code", "exception"),
    [(9, "NVMLError_DriverNotLoaded"), (4, "NVMLError_NoPermission"), (999, "NVMLError_Unknown")],
)
def test_init_error_raises_matching_exception(fake_nvml_dir, code, exception):
    out = _run_json(
        """
        import json
        import pynvml

        try:
            pynvml.nvmlInit()
            raised = None
        except pynvml.NVMLError as e:
            raised = [type(e).__name__, e.value, str(e)]
        print(json.dumps({"raised": raised, "inits": pynvml.nvmlLib.fakeNvmlInitCount()}))
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_INIT_ERROR": str(code)},
    )
    assert out["raised"][:2] == [exception, code]
    assert out["inits"] == 0


def test_unsupported_function_only(fake_nvml_dir):
    out = _run_json(
        """
        import json
        import pynvml

        pynvml.nvmlInit()
        out = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                pynvml.nvmlDeviceGetPowerUsage(h)
            except pynvml.NVMLError_NotSupported as e:
                out[f"power{i}"] = e.value
            out[f"temp{i}"] = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
            out[f"util{i}"] = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        print(json.dumps(out))
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_UNSUPPORTED": "nvmlDeviceGetPowerUsage"},
    )
    assert out == {"power0": 3, "temp0": 50, "util0": 40, "power1": 3, "temp1": 51, "util1": 41}


def test_unsupported_list_matches_whole_names(fake_nvml_dir):
    out = _run_json(
        """
        import json
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        out = {}
        for name, call in [
            ("mem", lambda: pynvml.nvmlDeviceGetMemoryInfo(h).used),
            ("mem_v2", lambda: pynvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2).used),
            ("clock", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
        ]:
            try:
                out[name] = call()
            except pynvml.NVMLError as e:
                out[name] = type(e).__name__
        print(json.dumps(out))
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_UNSUPPORTED": "nvmlDeviceGetMemoryInfo_v2,nvmlDeviceGetClockInfo"},
    )
    unsupported = "NVMLError_NotSupported"
    assert out == {"mem": GIB + GIB // 2, "mem_v2": unsupported, "clock": unsupported}


def test_lost_gpu_after_n_utilization_calls(fake_nvml_dir):
    out = _run_json(
        """
        import json
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
        log = []
        for step in range(4):
            row = []
            for h in handles:
                try:
                    row.append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
                except pynvml.NVMLError_GpuIsLost:
                    row.append("lost")
            log.append(row)
        after = {}
        for name, call in [
            ("power", lambda: pynvml.nvmlDeviceGetPowerUsage(handles[1])),
            ("mem", lambda: pynvml.nvmlDeviceGetMemoryInfo(handles[1]).used),
            ("handle", lambda: pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByIndex(1))),
            ("other_power", lambda: pynvml.nvmlDeviceGetPowerUsage(handles[0])),
        ]:
            try:
                after[name] = call()
            except pynvml.NVMLError as e:
                after[name] = type(e).__name__
        calls = [pynvml.nvmlLib.fakeNvmlUtilizationCallCount(i) for i in range(2)]
        print(json.dumps({"log": log, "after": after, "calls": calls}))
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_LOST_INDEX": "1", "FAKE_NVML_LOST_AFTER": "2"},
    )
    assert out["log"] == [[40, 41], [40, 41], [40, "lost"], [40, "lost"]]
    assert out["after"] == {
        "power": "NVMLError_GpuIsLost",
        "mem": "NVMLError_GpuIsLost",
        "handle": "NVMLError_GpuIsLost",
        "other_power": 150000,
    }
    assert out["calls"] == [4, 2]


def test_init_counter_and_refcounted_shutdown(fake_nvml_dir):
    out = _run_json(
        """
        import ctypes
        import json
        import pynvml

        lib = ctypes.CDLL("libnvidia-ml.so.1")  # the same loaded library pynvml uses
        out = {"before": lib.fakeNvmlInitCount()}
        pynvml.nvmlInit()
        pynvml.nvmlInit()
        out["after_two"] = [lib.fakeNvmlInitCount(), pynvml.nvmlLib.fakeNvmlInitCount()]
        pynvml.nvmlShutdown()
        out["count_after_one_shutdown"] = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        try:
            pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as e:
            out["after_full_shutdown"] = type(e).__name__
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as e:
            out["extra_shutdown"] = type(e).__name__
        out["shutdowns"] = lib.fakeNvmlShutdownCount()
        print(json.dumps(out))
        """,
        fake_nvml_dir,
    )
    assert out == {
        "before": 0,
        "after_two": [2, 2],
        "count_after_one_shutdown": 2,
        "after_full_shutdown": "NVMLError_Uninitialized",
        "extra_shutdown": "NVMLError_Uninitialized",
        "shutdowns": 2,
    }


_GPM = """
import json
import pynvml

pynvml.nvmlInit()
out = {}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    supported = pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        pynvml.nvmlGpmSampleGet(h, s1)
        pynvml.nvmlGpmSampleGet(h, s2)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.sample1, request.sample2 = s1, s2
        ids = [
            pynvml.NVML_GPM_METRIC_SM_UTIL,
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
            pynvml.NVML_GPM_METRIC_MAX - 1,
        ]
        request.numMetrics = len(ids)
        for slot, metric_id in enumerate(ids):
            request.metrics[slot].metricId = metric_id
        pynvml.nvmlGpmMetricsGet(request)
        metrics = [[m.nvmlReturn, m.value] for m in request.metrics[: len(ids)]]
    except pynvml.NVMLError as e:
        metrics = type(e).__name__
    finally:
        pynvml.nvmlGpmSampleFree(s1)
        pynvml.nvmlGpmSampleFree(s2)
    out[i] = {"supported": supported, "metrics": metrics}
print(json.dumps(out))
"""


def test_gpm_unsupported_by_default(fake_nvml_dir):
    out = _run_json(_GPM, fake_nvml_dir, env={"FAKE_NVML_DEVICE_COUNT": "1"})
    assert out == {"0": {"supported": 0, "metrics": "NVMLError_NotSupported"}}


def test_gpm_metrics_when_supported(fake_nvml_dir):
    out = _run_json(_GPM, fake_nvml_dir, env={"FAKE_NVML_GPM_SUPPORTED": "1"})
    assert out == {
        str(i): {
            "supported": 1,
            "metrics": [[0, 60.0 + i], [0, 30.0 + i], [0, 25.0 + i], [0, 35.0 + i], [3, 0.0]],
        }
        for i in range(2)
    }


def test_no_library_raises_library_not_found():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("a real NVML library is installed on this machine")
    result = run_python_with_fake_nvml(
        textwrap.dedent(
            """
            import pynvml

            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError_LibraryNotFound as e:
                print("LibraryNotFound", e.value)
            """
        ),
        None,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "LibraryNotFound 12"


def test_concurrent_calls_are_counted_exactly(fake_nvml_dir):
    # ctypes releases the GIL around each call, so a sampler thread really runs alongside the
    # caller; the fake's lock keeps its counters exact.
    out = _run_json(
        """
        import json
        import threading
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)

        def poll():
            for _ in range(500):
                pynvml.nvmlDeviceGetUtilizationRates(h)

        threads = [threading.Thread(target=poll) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps(pynvml.nvmlLib.fakeNvmlUtilizationCallCount(0)))
        """,
        fake_nvml_dir,
    )
    assert out == 2000


def test_reset_forgets_counters_and_open_inits(fake_nvml_dir):
    out = _run_json(
        """
        import json
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(1))
        lib = pynvml.nvmlLib
        before = [lib.fakeNvmlInitCount(), lib.fakeNvmlUtilizationCallCount(1)]
        lib.fakeNvmlReset()
        after = [lib.fakeNvmlInitCount(), lib.fakeNvmlUtilizationCallCount(1)]
        try:
            pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError_Uninitialized:
            after.append("uninitialized")
        print(json.dumps([before, after]))
        """,
        fake_nvml_dir,
    )
    assert out == [[1, 1], [0, 0, "uninitialized"]]


def test_scripted_errors_per_function(fake_nvml_dir):
    out = _run_json(
        """
        import json
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(1)
        out = {}
        for name, call in [
            ("mem", lambda: pynvml.nvmlDeviceGetMemoryInfo(h).used),
            ("mem_v2", lambda: pynvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2).used),
            ("power", lambda: pynvml.nvmlDeviceGetPowerUsage(h)),
            ("temp", lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
        ]:
            try:
                out[name] = call()
            except pynvml.NVMLError as e:
                out[name] = type(e).__name__
        print(json.dumps(out))
        """,
        fake_nvml_dir,
        env={
            "FAKE_NVML_ERRORS": "nvmlDeviceGetMemoryInfo_v2=25,nvmlDeviceGetPowerUsage=13",
            "FAKE_NVML_UNSUPPORTED": "nvmlDeviceGetPowerUsage",  # checked first
        },
    )
    assert out == {
        "mem": 2 * GIB + GIB // 2,
        "mem_v2": "NVMLError_ArgumentVersionMismatch",
        "power": "NVMLError_NotSupported",
        "temp": 51,
    }


def test_sample_buffers_as_scripted(fake_nvml_dir):
    out = _run_json(
        """
        import ctypes
        import json
        import time
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        lib = pynvml.nvmlLib
        lib.fakeNvmlSamplesOrigin.restype = ctypes.c_ulonglong
        origin = lib.fakeNvmlSamplesOrigin()  # 70 s ago: samples 0 and 1 exist, 2 in 50 s
        size = ctypes.c_uint(0)
        kind = ctypes.c_uint(0)
        ret = lib.nvmlDeviceGetSamples(h, 1, ctypes.c_ulonglong(0), ctypes.byref(kind),
                                       ctypes.byref(size), None)
        out = {"size_query": [ret, size.value]}
        kind, samples = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
        out["all"] = [kind] + [[s.timeStamp - origin, s.sampleValue.uiVal] for s in samples]
        _, newer = pynvml.nvmlDeviceGetSamples(h, 1, origin)  # newer than sample 0
        out["newer"] = [[s.timeStamp - origin, s.sampleValue.uiVal] for s in newer]
        for name, kind in [("none_new", 1), ("power", 0), ("memory", 2)]:
            try:
                pynvml.nvmlDeviceGetSamples(h, kind, origin + 60_000_000)
            except pynvml.NVMLError as e:
                out[name] = type(e).__name__
        out["point"] = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        out["util_reads"] = lib.fakeNvmlUtilizationCallCount(0)
        print(json.dumps(out))
        """,
        fake_nvml_dir,
        env={
            "FAKE_NVML_SAMPLES_GPU": "7,9",
            "FAKE_NVML_SAMPLES_MEMORY": "5",
            "FAKE_NVML_SAMPLES_CAPACITY": "4",
            "FAKE_NVML_SAMPLES_PERIOD_MS": "60000",
            "FAKE_NVML_SAMPLES_BACKDATE_MS": "70000",
            "FAKE_NVML_UTILIZATION_GPU": "3",
        },
    )
    assert out == {
        "size_query": [0, 4],  # "how many can be queried": the capacity
        "all": [1, [0, 7], [60_000_000, 9]],  # NVML_VALUE_TYPE_UNSIGNED_INT, oldest first
        "newer": [[60_000_000, 9]],
        "none_new": "NVMLError_NotFound",
        "power": "NVMLError_NotSupported",  # no script: no buffer
        "memory": "NVMLError_NotFound",
        "point": 3,
        "util_reads": 5,  # four GPU-Util buffer calls (counted at their size query) + the point
    }


def test_sample_buffer_is_bounded(fake_nvml_dir):
    out = _run_json(
        """
        import ctypes
        import json
        import time
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(1)
        pynvml.nvmlLib.fakeNvmlSamplesOrigin.restype = ctypes.c_ulonglong
        origin = pynvml.nvmlLib.fakeNvmlSamplesOrigin()  # 280 s ago: samples 0..4 exist
        _, samples = pynvml.nvmlDeviceGetSamples(h, 0, 0)
        print(json.dumps([(s.timeStamp - origin) // 60_000_000 for s in samples]))
        """,
        fake_nvml_dir,
        env={
            "FAKE_NVML_SAMPLES_POWER": "1",
            "FAKE_NVML_SAMPLES_PERIOD_MS": "60000",
            "FAKE_NVML_SAMPLES_BACKDATE_MS": "280000",
            "FAKE_NVML_SAMPLES_CAPACITY": "3",
        },
    )
    assert out == [2, 3, 4]  # the newest 3; the sixth sample is 20 s away


@pytest.mark.parametrize("replay", ["0", "1"])
def test_a_replaying_buffer_returns_seen_samples_again(fake_nvml_dir, replay):
    out = _run_json(
        """
        import ctypes
        import json
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlLib.fakeNvmlSamplesOrigin.restype = ctypes.c_ulonglong
        origin = pynvml.nvmlLib.fakeNvmlSamplesOrigin()
        reads = []
        for last_seen in (0, origin, origin + 1):  # none, sample 0's timestamp, after it
            try:
                _, samples = pynvml.nvmlDeviceGetSamples(h, 1, last_seen)
                reads.append([[s.timeStamp - origin, s.sampleValue.uiVal] for s in samples])
            except pynvml.NVMLError as e:
                reads.append(type(e).__name__)
        print(json.dumps(reads))
        """,
        fake_nvml_dir,
        # One sample a minute: only sample 0 exists during the test, whatever the machine's load.
        env={
            "FAKE_NVML_SAMPLES_GPU": "7",
            "FAKE_NVML_SAMPLES_PERIOD_MS": "60000",
            "FAKE_NVML_SAMPLES_REPLAY": replay,
        },
    )
    if replay == "1":  # sample 0 again, its timestamp reused, however recent lastSeenTimeStamp
        assert out == [[[0, 7]], [[0, 7]], [[0, 7]]]
    else:
        assert out == [[[0, 7]], "NVMLError_NotFound", "NVMLError_NotFound"]


_ENERGY = """
import json
import time
import pynvml

pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
first = [pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles]
time.sleep(0.2)
more = [[pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for _ in range(3)] for h in handles]
print(json.dumps({"first": first, "more": more}))
"""


def test_energy_counter_runs_at_the_fake_power_by_default(fake_nvml_dir):
    out = _run_json(_ENERGY, fake_nvml_dir)
    for i in range(2):
        assert 1_000_000_000 <= out["first"][i] < 1_000_000_000 + (150 + i) * 100  # < 0.1 s in
        gained = out["more"][i][0] - out["first"][i]
        assert (150 + i) * 200 <= gained <= (150 + i) * 400  # mJ over the 0.2 s sleep


def test_energy_counter_scripted_per_device(fake_nvml_dir):
    out = _run_json(_ENERGY, fake_nvml_dir, env={"FAKE_NVML_ENERGY": "5000,9000,2000"})
    assert out == {"first": [5000, 5000], "more": [[9000, 2000, 2000]] * 2}


def test_mig_devices_and_process_lists(fake_nvml_dir):
    out = _run_json(
        """
        import json
        import os
        import pynvml

        def attempt(call):
            try:
                return call()
            except pynvml.NVMLError as e:
                return type(e).__name__

        pynvml.nvmlInit()
        gpu0, gpu1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        out = {
            "mode": [attempt(lambda: pynvml.nvmlDeviceGetMigMode(h)) for h in (gpu0, gpu1)],
            "slots": attempt(lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu0)),
            "slot 1": attempt(lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 1)),
        }
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0)
        mem = pynvml.nvmlDeviceGetMemoryInfo(mig, version=pynvml.nvmlMemory_v2)
        out["mig"] = [
            pynvml.nvmlDeviceGetUUID(mig),
            pynvml.nvmlDeviceGetName(mig),
            [mem.total, mem.reserved, mem.used],
            attempt(lambda: pynvml.nvmlDeviceGetUtilizationRates(mig)),
        ]
        out["processes"] = [
            [[p.pid == os.getpid() or p.pid, p.usedGpuMemory] for p in
             pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
            for h in (gpu0, gpu1, mig)
        ]
        print(json.dumps(out))
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_MIG": "0:1", "FAKE_NVML_PROCESSES": "self:1024,77:10"},
    )
    mib = 1024**2
    assert out == {
        "mode": [[1, 1], "NVMLError_NotSupported"],
        "slots": 7,
        "slot 1": "NVMLError_NotFound",
        "mig": [
            "MIG-00000000-0000-0000-0000-000000000000",
            "Fake GPU 0 MIG 0",
            [10 * GIB, 0, 256 * mib],
            "NVMLError_NotSupported",
        ],
        "processes": [
            [[True, 1024 * mib], [77, 10 * mib]],
            [[True, 1280 * mib], [77, 266 * mib]],  # device 1: 256 MiB more each
            [[True, 1024 * mib], [77, 10 * mib]],  # MIG device 0: 64 * 0 more
        ],
    }


def test_no_processes_listed_by_default(fake_nvml_dir):
    out = _run_json(
        """
        import json
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        print(json.dumps(pynvml.nvmlDeviceGetComputeRunningProcesses(h)))
        """,
        fake_nvml_dir,
    )
    assert out == []
