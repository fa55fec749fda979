"""`hardware.host`: the psutil source, its units, and CPU percentages that are never an artefact
of a short span (a false 0 % or thousands of %)."""

from __future__ import annotations

import os
import threading
import time
from collections import namedtuple

import psutil
import pytest
from fakes import FakeClock

from tfthroughput.hardware.host import MIN_CPU_SPAN_SECONDS, HostSource
from tfthroughput.hardware.metrics import HOST_METRICS
from tfthroughput.hardware.sampler import SampleKey, Sampler
from tfthroughput.hardware.source import Source

GIB = 1024**3
HOST_NAMES = {metric.name for metric in HOST_METRICS}
CPU_NAMES = {"cpu_percent", "process_cpu_percent"}
# The kernel counts CPU time in ticks: a percentage over a span of t seconds is exact to
# +-1 tick of user and +-1 tick of system time, i.e. +-2 ticks / t.
TICK_SECONDS = 1.0 / os.sysconf("SC_CLK_TCK")
PROCESS_QUANTISATION_PERCENT = 100.0 * 2 * TICK_SECONDS / MIN_CPU_SPAN_SECONDS


class _FakeProcess:
    """The two `psutil.Process` methods HostSource uses, with CPU time set by the test."""

    def __init__(self, rss: int) -> None:
        self.cpu_seconds = 0.0
        self._rss = rss

    def cpu_times(self):
        return namedtuple("pcputimes", "user system")(self.cpu_seconds * 0.75, self.cpu_seconds / 4)

    def memory_info(self):
        return namedtuple("pmem", "rss vms")(self._rss, 2 * self._rss)


def test_host_source_reports_every_host_metric_in_range():
    source = HostSource()
    assert isinstance(source, Source)
    assert source.name == "host"
    # Right after creation no CPU span has elapsed yet: psutil's counters move in 10 ms ticks,
    # so a percentage now would be 0 or thousands. Memory is instantaneous.
    assert set(source.read()) == HOST_NAMES - CPU_NAMES
    time.sleep(MIN_CPU_SPAN_SECONDS)
    values = source.read()
    source.close()
    assert set(values) == HOST_NAMES
    assert all(isinstance(value, float) for value in values.values())
    assert 0.0 <= values["cpu_percent"] <= 100.0
    assert 0.0 <= values["ram_used_percent"] <= 100.0
    # percent of one core: up to 100 per core, within the tick quantisation over the span
    cores = psutil.cpu_count() or 1
    assert 0.0 <= values["process_cpu_percent"] <= 100.0 * cores + PROCESS_QUANTISATION_PERCENT
    rss_gib = psutil.Process(os.getpid()).memory_info().rss / GIB
    assert 0.0 < values["process_rss_gib"] <= 2 * rss_gib


def test_host_source_watches_the_given_process_in_exact_units():
    process = _FakeProcess(rss=3 * GIB // 2)
    clock = FakeClock(10.0)
    source = HostSource(["process_cpu_percent", "process_rss_gib"], process=process, clock=clock)
    clock.advance(0.5)
    process.cpu_seconds = 1.25  # 2.5 cores busy for 0.5 s
    assert source.read() == {"process_cpu_percent": 250.0, "process_rss_gib": 1.5}


def test_each_thread_measures_from_its_own_previous_reading():
    process = _FakeProcess(rss=GIB)
    clock = FakeClock(0.0)
    source = HostSource(["process_cpu_percent"], process=process, clock=clock)
    other_thread: list[dict[str, float]] = []

    def read_on_another_thread():
        other_thread.append(source.read())

    clock.advance(1.0)
    process.cpu_seconds = 0.5
    assert source.read() == {"process_cpu_percent": 50.0}  # this thread: 0 -> 1 s
    clock.advance(0.001)
    process.cpu_seconds = 0.5005
    # The other thread's first span starts at creation: 0.5005 CPU-s over 1.001 s. A shared
    # starting point would have made it 0.0005 CPU-s over 1 ms: 50 %, or 0 % / 1,000 % as
    # real 10 ms ticks fall.
    reader = threading.Thread(target=read_on_another_thread)
    reader.start()
    reader.join()
    assert other_thread == [{"process_cpu_percent": pytest.approx(50.0)}]
    # ... and this thread, 1 ms after its own last reading, gets the trailing span from the
    # latest reading at least 0.1 s old (creation): 0.5005 CPU-s over 1.001 s.
    assert source.read() == {"process_cpu_percent": pytest.approx(50.0)}
    # That reading did not restart its own span: the next one still runs from 1 s.
    clock.now = 1.0 + 2 * MIN_CPU_SPAN_SECONDS
    process.cpu_seconds = 0.5 + MIN_CPU_SPAN_SECONDS
    assert source.read() == {"process_cpu_percent": pytest.approx(50.0)}


def test_a_reading_too_soon_after_the_last_gets_the_trailing_span_of_any_thread():
    # The end of a window a few steps long, read on Keras's callback thread: its own last
    # reading was 20 ms ago, the sampler thread's 0.3 s ago.
    process = _FakeProcess(rss=GIB)
    clock = FakeClock(0.0)
    source = HostSource(["process_cpu_percent"], process=process, clock=clock)
    assert source.read() == {}  # within 0.1 s of creation: nothing to measure over
    clock.advance(1.0)
    process.cpu_seconds = 0.5
    sampler = threading.Thread(target=source.read)  # the sampler thread: 0 -> 1 s
    sampler.start()
    sampler.join()
    clock.advance(0.28)
    process.cpu_seconds = 0.64  # 0.14 CPU-s in 0.28 s: 50 %
    assert source.read() == {"process_cpu_percent": pytest.approx(50.0)}  # 0 -> 1.28 s
    clock.advance(0.02)
    process.cpu_seconds = 0.71  # 0.21 CPU-s over the trailing 0.3 s, from the sampler's read
    assert source.read() == {"process_cpu_percent": pytest.approx(70.0)}


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
    clock = FakeClock()
    source = HostSource(metrics, clock=clock)
    clock.advance(1.0)
    assert set(source.read()) == expected


def test_under_steady_load_no_process_cpu_minimum_is_a_false_zero():
    """The sampler thread and the training thread (`collect(sample_now=True)` at each epoch's
    end) both read the host; neither may see a span shortened by the other."""
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    load = threading.Thread(target=spin, name="steady-load")
    load.start()
    try:
        windows = []
        with Sampler([HostSource(["process_cpu_percent"])], interval=0.05) as sampler:
            for _ in range(12):  # "epochs" of about 0.15 s, ended on this thread
                time.sleep(0.15)
                windows.append(sampler.collect(sample_now=True))
    finally:
        stop.set()
        load.join()
    key = SampleKey("host", "process_cpu_percent")
    readings = [window[key] for window in windows if key in window]
    assert len(readings) >= 10
    assert sum(stats.count for stats in readings) > len(readings)  # both threads read
    cores = psutil.cpu_count() or 1
    for stats in readings:
        assert stats.min > 0.0
        assert stats.max <= 100.0 * cores + PROCESS_QUANTISATION_PERCENT
