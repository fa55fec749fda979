"""NVML's sample buffers through the real pynvml bindings and the fake `libnvidia-ml.so.1`.

The fake's buffers (see `tests/fake_nvml/fake_nvml.c`): sample k of every buffer has the
timestamp origin + k * period (microseconds of its clock, realtime unless told otherwise) and
the value script[k % length].
"""

from __future__ import annotations

import pytest
from fake_nvml import run_json_with_fake_nvml

from tfthroughput.hardware.gpu_buffer import identify_clock

WALL_NOW, BOOT_NOW = 1.7e9, 86_400.0  # a wall clock in 2023, a machine up for a day


@pytest.mark.parametrize(
    ("newest", "expected"),
    [
        (WALL_NOW - 0.2, "wall"),  # a wall-clock timestamp is far in the future after boot
        (BOOT_NOW - 0.2, "boot"),
        (BOOT_NOW - 300.0, "boot"),  # an idle buffer's newest sample may be minutes old
        (WALL_NOW + 0.5, "wall"),  # clock reads are not simultaneous: a little ahead is fine
    ],
)
def test_identify_clock_picks_the_clock_the_newest_sample_is_just_behind(newest, expected):
    clocks = {"wall": lambda: WALL_NOW, "boot": lambda: BOOT_NOW}
    chosen = identify_clock(newest, list(clocks.values()))
    assert chosen is clocks[expected]


def test_identify_clock_anchors_timestamps_in_the_future_of_every_clock_at_now():
    clock = identify_clock(WALL_NOW + 3600.0, [lambda: WALL_NOW, lambda: BOOT_NOW])
    assert clock() == pytest.approx(WALL_NOW + 3600.0, abs=0.5)


# Reads GPU-Util samples of device 0 through a SampleBuffer: once right away, then after the
# buffer has filled, then at once again; each read as [[age, value], ...] next to the fake's
# timestamps of the samples it should hold.
_READS = """
import ctypes
import os
import time
import pynvml
from tfthroughput.hardware.nvml import nvml
from tfthroughput.hardware.gpu_buffer import SampleBuffer

nvml()
lib = pynvml.nvmlLib
lib.fakeNvmlSamplesOrigin.restype = ctypes.c_ulonglong
origin = lib.fakeNvmlSamplesOrigin() / 1e6
clock = time.time if os.environ.get("FAKE_NVML_SAMPLES_CLOCK") != "boottime" else (
    lambda: time.clock_gettime(time.CLOCK_BOOTTIME))
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
buffer = SampleBuffer(pynvml, handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES)
reads = []
for pause in (0.0, 1.1, 0.0):
    time.sleep(pause)
    before = clock()
    samples = buffer.read()
    now = clock()
    reads.append({"samples": samples, "before": before - origin, "now_since_origin": now - origin})
emit({"reads": reads, "supported": buffer.supported, "calls": lib.fakeNvmlUtilizationCallCount(0)})
"""


@pytest.mark.parametrize("clock", ["realtime", "boottime"])
def test_a_buffer_returns_each_sample_once_with_its_age(fake_nvml_dir, clock):
    out = run_json_with_fake_nvml(
        _READS,
        fake_nvml_dir,
        env={
            "FAKE_NVML_SAMPLES_GPU": "100,0,0,0,0",
            "FAKE_NVML_SAMPLES_CAPACITY": "3",  # the 1.1 s pause overflows it
            "FAKE_NVML_SAMPLES_CLOCK": clock,
        },
    )
    first, filled, again = out["reads"]
    assert first["samples"] == [[pytest.approx(first["samples"][0][0]), 100.0]]  # sample 0
    # After 1.1 s samples 0..5 exist; the buffer holds the newest 3, sample 0 was seen.
    # The read happened between `before` and `now`, and a sample period may end in between:
    # the newest sample is the one its age points at, a sample taken by then.
    newest = round((filled["now_since_origin"] - filled["samples"][-1][0]) / 0.2)
    assert int(filled["before"] / 0.2) <= newest <= int(filled["now_since_origin"] / 0.2)
    assert newest >= 5
    ks = [newest - 2, newest - 1, newest]
    assert [value for _, value in filled["samples"]] == [100.0 if k % 5 == 0 else 0.0 for k in ks]
    for (age, _), k in zip(filled["samples"], ks, strict=True):
        # age = now - taken, both on the samples' clock (read a moment before `now` here)
        assert filled["now_since_origin"] - k * 0.2 - age == pytest.approx(0.0, abs=0.05)
    assert again["samples"] == []  # "not found": nothing new is not an error
    assert out["supported"] is True
    assert out["calls"] == 3


def test_a_gpu_without_the_buffer_is_asked_once(fake_nvml_dir):
    out = run_json_with_fake_nvml(_READS, fake_nvml_dir)  # no script: not supported
    assert [read["samples"] for read in out["reads"]] == [None, None, None]
    assert out["supported"] is False


# Reads GPU-Util samples of device 0 through a SampleBuffer, four times with pauses between.
_REPLAYED_READS = """
import time
import pynvml
from tfthroughput.hardware.nvml import nvml
from tfthroughput.hardware.gpu_buffer import SampleBuffer

nvml()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
buffer = SampleBuffer(pynvml, handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES)
reads = []
for pause in (0.0, 0.3, 0.0, 0.3):
    time.sleep(pause)
    reads.append([value for _, value in buffer.read()])
emit(reads)
"""


def test_samples_a_buffer_returns_again_are_dropped(fake_nvml_dir):
    # A ring buffer that returns all it holds on every call (NVML does so when asked with a
    # timestamp older than the buffer): each read repeats the samples of the reads before.
    # Sample k has the value k (k < 200), so the reads together must be 0, 1, 2, ... once each.
    out = run_json_with_fake_nvml(
        _REPLAYED_READS,
        fake_nvml_dir,
        env={
            "FAKE_NVML_SAMPLES_GPU": ",".join(str(k) for k in range(200)),
            "FAKE_NVML_SAMPLES_PERIOD_MS": "50",
            "FAKE_NVML_SAMPLES_CAPACITY": "200",  # 10 s: the reads lose nothing to the ring
            "FAKE_NVML_SAMPLES_REPLAY": "1",
        },
    )
    seen = [value for read in out for value in read]
    assert seen == [float(k) for k in range(len(seen))], out
    first, after_pause, _, after_another = out
    assert first[0] == 0.0
    assert after_pause and after_another, out  # 0.3 s at 50 ms: new samples after each pause


# A BufferedQuery over the point query of utilization: one buffer per selected metric.
_QUERY = """
import os
import time
import pynvml
from tfthroughput.hardware.nvml import nvml
from tfthroughput.hardware.gpu_buffer import BufferedQuery, SampleBuffer

nvml()
handle = pynvml.nvmlDeviceGetHandleByIndex(1)
types = {
    "utilization_percent": pynvml.NVML_GPU_UTILIZATION_SAMPLES,
    "memory_utilization_percent": pynvml.NVML_MEMORY_UTILIZATION_SAMPLES,
}

def point(handle):
    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
    return {"utilization_percent": rates.gpu, "memory_utilization_percent": rates.memory}

query = BufferedQuery(
    pynvml, point, {name: SampleBuffer(pynvml, handle, kind) for name, kind in types.items()}
)
first = query(handle)
second = query(handle)  # at once: nothing new in either buffer
emit({
    "first": {name: [list(r.samples), r.fallback] if isinstance(r, tuple) else r
              for name, r in first.items()},
    "second": {name: [list(r.samples), r.fallback] if isinstance(r, tuple) else r
               for name, r in second.items()},
})
"""


def test_point_readings_fill_in_for_a_missing_or_empty_buffer(fake_nvml_dir):
    out = run_json_with_fake_nvml(
        _QUERY,
        fake_nvml_dir,
        env={"FAKE_NVML_SAMPLES_GPU": "100,0", "FAKE_NVML_UTILIZATION_GPU": "0"},
    )
    first_util = out["first"]["utilization_percent"]
    assert [value for _, value in first_util[0]] == [100.0] and first_util[1] is None
    assert out["first"]["memory_utilization_percent"] == 21.0  # no buffer: the point value
    assert out["second"] == {
        "utilization_percent": [[], 0.0],  # nothing new: the point reading as the fallback
        "memory_utilization_percent": 21.0,
    }
