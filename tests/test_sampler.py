from __future__ import annotations

import threading
import time
import warnings

import pytest
from fakes import FakeClock, FakeSource

from tfthroughput.hardware.sampler import SampleKey, Sampler
from tfthroughput.hardware.source import MonitoringWarning, SourceLost, TimedSamples
from tfthroughput.hardware.stats import MetricStats, summarize


def test_collect_summarises_the_window_exactly_and_starts_a_new_one():
    source = FakeSource("gpu0", lambda n: {"utilization_percent": 10.0 * n})
    sampler = Sampler([source], interval=1.0)
    for _ in range(4):
        sampler.sample_once()
    stats = sampler.collect()
    assert stats == {
        SampleKey("gpu0", "utilization_percent"): MetricStats(
            mean=25.0, min=10.0, max=40.0, p95=38.5, count=4
        )
    }
    sampler.sample_once()
    assert sampler.collect()[SampleKey("gpu0", "utilization_percent")].count == 1
    assert sampler.collect() == {}


def test_sample_now_gives_a_short_window_a_value():
    sampler = Sampler([FakeSource("host", {"cpu_percent": 7.0})], interval=1.0)
    assert sampler.collect(sample_now=True)[SampleKey("host", "cpu_percent")].mean == 7.0


def test_the_thread_samples_at_the_interval_and_closes_sources():
    source = FakeSource("gpu0", {"power_watts": 100.0})
    with Sampler([source], interval=0.05) as sampler:
        assert sampler.running
        deadline = time.monotonic() + 5
        while source.reads < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert not sampler.running
    assert source.closed
    stats = sampler.collect()  # what was sampled survives the stop
    assert stats[SampleKey("gpu0", "power_watts")].count == source.reads >= 3


def test_a_lost_source_is_dropped_once_and_the_others_continue():
    lost = FakeSource(
        "gpu1",
        {"utilization_percent": 1.0},
        fail_on=range(3, 100),
        error=SourceLost("gpu1: GPU is lost"),
    )
    healthy = FakeSource("gpu0", {"utilization_percent": 2.0})
    sampler = Sampler([healthy, lost], interval=1.0)
    with pytest.warns(MonitoringWarning, match="GPU is lost") as caught:
        for _ in range(6):
            sampler.sample_once()
    assert len(caught) == 1
    assert lost.reads == 3 and lost.closed
    assert sampler.source_names == ["gpu0"]
    assert sampler.lost == {"gpu1": "gpu1: GPU is lost"}
    stats = sampler.collect()
    assert (
        stats[SampleKey("gpu1", "utilization_percent")].count == 2
    )  # what it gave before it was lost
    assert stats[SampleKey("gpu0", "utilization_percent")].count == 6


def test_other_source_errors_are_warned_once_and_sampling_goes_on():
    flaky = FakeSource("host", {"cpu_percent": 5.0}, fail_on={2, 3, 5})
    sampler = Sampler([flaky], interval=1.0)
    with pytest.warns(MonitoringWarning, match="fake failure") as caught:
        for _ in range(6):
            sampler.sample_once()
    assert len(caught) == 1
    assert sampler.collect()[SampleKey("host", "cpu_percent")].count == 3


def test_no_exception_leaves_the_sampler_thread():
    broken = FakeSource("gpu0", {}, fail_on=range(1, 1000), error=ZeroDivisionError("boom"))
    errors = []
    previous_hook = threading.excepthook
    threading.excepthook = errors.append
    try:
        with warnings.catch_warnings(record=True), Sampler([broken], interval=0.05) as sampler:
            deadline = time.monotonic() + 5
            while broken.reads < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert sampler.running
    finally:
        threading.excepthook = previous_hook
    assert errors == []
    assert broken.reads >= 3


def test_keep_running_false_abandons_the_window_to_the_callback_and_ends_the_thread():
    running = threading.Event()
    running.set()
    abandoned = []
    source = FakeSource("gpu0", {"utilization_percent": 3.0})
    sampler = Sampler(
        [source],
        interval=0.05,
        keep_running=running.is_set,
        on_abandoned=lambda: abandoned.append(sampler.collect()),
    ).start()
    deadline = time.monotonic() + 5
    while source.reads < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    running.clear()
    while sampler.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not sampler.running
    assert abandoned[0][SampleKey("gpu0", "utilization_percent")].mean == 3.0
    assert source.closed
    sampler.stop()


def test_watching_asks_keep_running_now_and_is_true_without_one():
    running = threading.Event()
    running.set()
    watching = Sampler([], interval=600, keep_running=running.is_set)
    seen = [watching.watching()]
    running.clear()  # long before the sampler's next sample would ask
    seen.append(watching.watching())
    assert seen == [True, False]
    assert Sampler([], interval=600).watching()


@pytest.mark.parametrize(
    ("interval", "error"),
    [
        (0, ValueError),
        (-1.0, ValueError),
        (0.01, ValueError),
        ("1", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_invalid_interval_names_the_argument_and_value(interval, error):
    with pytest.raises(error, match=f"Received: interval={interval!r}"):
        Sampler([], interval=interval)


def test_the_minimum_interval_is_accepted():
    assert Sampler([], interval=0.05).interval == 0.05


def test_objects_that_are_not_sources_are_rejected():
    with pytest.raises(TypeError, match="Received: 42"):
        Sampler([42])


def test_timed_samples_land_in_the_window_of_their_own_time_on_the_samplers_clock():
    # A buffer that took 100, 0, 0, 0 every 0.25 s; the sampler reads it once a second.
    clock = FakeClock(100.0)
    taken = [(99.75, 100.0), (100.0, 0.0), (100.25, 0.0), (100.5, 0.0), (100.75, 100.0)]
    pending = list(taken)

    def buffer(_read):
        now = clock()
        new = [(t, v) for t, v in pending if t <= now]
        del pending[: len(new)]
        return {"utilization_percent": TimedSamples(tuple((now - t, v) for t, v in new))}

    sampler = Sampler([FakeSource("gpu0", buffer)], interval=1.0, clock=clock)
    clock.advance(0.625)
    sampler.sample_once()  # at 100.625: 99.75 predates the window (opened at 100)
    clock.advance(0.0625)
    first = sampler.collect()  # cut at 100.6875
    clock.advance(0.3125)
    second = sampler.collect(sample_now=True)  # reads 100.75 at 101
    key = SampleKey("gpu0", "utilization_percent")
    assert first == {key: summarize([0.0, 0.0, 0.0])}
    assert first.buffer_samples == {key: 3}
    assert second == {key: summarize([100.0])}
    assert (second.start, second.end, second.buffer_samples) == (100.6875, 101.0, {key: 1})


def test_a_reading_that_is_not_a_number_is_warned_about_once_and_sampling_goes_on():
    odd = FakeSource("gpu0", lambda n: {"power_watts": "high" if n % 2 else 100.0})
    sampler = Sampler([odd], interval=1.0)
    with pytest.warns(MonitoringWarning, match="ValueError") as caught:
        for _ in range(4):
            sampler.sample_once()
    assert len(caught) == 1
    assert sampler.collect()[SampleKey("gpu0", "power_watts")] == summarize([100.0, 100.0])
