from __future__ import annotations

import pytest

from tfthroughput.hardware.source import Increment, TimedSamples
from tfthroughput.hardware.stats import MetricStats, summarize
from tfthroughput.hardware.window_stats import SampleKey, SampleStore, WindowTotal, check_reading

UTIL = SampleKey("gpu0", "utilization_percent")
POWER = SampleKey("gpu0", "power_watts")


def _stats(*values: float) -> MetricStats:
    return summarize(values)


def test_point_readings_belong_to_the_open_window():
    store = SampleStore(start=10.0)
    store.add(POWER, 100.0, now=10.5)
    store.add(POWER, 200.0, now=11.0)
    window = store.cut(now=11.0)
    assert window == {POWER: _stats(100.0, 200.0)}
    assert (window.start, window.end, window.buffer_samples) == (10.0, 11.0, {})
    assert store.cut(now=12.0) == {}


def test_timed_samples_are_filed_by_their_own_time():
    # Buffer samples every 0.25 s: 100 at 9.75 and 10.75, 0 between. The window opened at 10.
    store = SampleStore(start=10.0)
    taken = {9.75: 100.0, 10.0: 0.0, 10.25: 0.0, 10.5: 0.0, 10.75: 100.0}
    # Read at 11: the sample taken at 9.75 predates the window and is dropped.
    store.add(UTIL, TimedSamples(tuple((11.0 - t, v) for t, v in taken.items())), now=11.0)
    window = store.cut(now=11.0)
    assert window == {UTIL: _stats(0.0, 0.0, 0.0, 100.0)}
    assert window.buffer_samples == {UTIL: 4}


def test_a_boundary_splits_samples_read_after_it_by_their_time():
    store = SampleStore(start=0.0)
    store.add(UTIL, TimedSamples(((0.375, 100.0), (0.125, 0.0))), now=0.5)  # 0.125, 0.375
    first = store.cut(now=0.625)
    # Read at 1: 0.5 belongs to the first window (already summarised), 0.75 and 0.875 here.
    store.add(UTIL, TimedSamples(((0.5, 50.0), (0.25, 20.0), (0.125, 40.0))), now=1.0)
    second = store.cut(now=1.0)
    assert first == {UTIL: _stats(100.0, 0.0)} and first.buffer_samples == {UTIL: 2}
    assert second == {UTIL: _stats(20.0, 40.0)} and second.buffer_samples == {UTIL: 2}


def test_a_point_fallback_stands_in_only_for_a_window_without_timed_samples():
    store = SampleStore(start=0.0)
    store.add(UTIL, TimedSamples((), fallback=7.0), now=0.1)
    store.add(UTIL, TimedSamples((), fallback=9.0), now=0.2)
    only_fallbacks = store.cut(now=0.25)
    store.add(UTIL, TimedSamples((), fallback=7.0), now=0.4)
    store.add(UTIL, TimedSamples(((0.125, 60.0),)), now=0.5)
    mixed = store.cut(now=0.625)
    assert only_fallbacks == {UTIL: _stats(7.0, 9.0)}
    assert only_fallbacks.buffer_samples == {UTIL: 0}
    assert mixed == {UTIL: _stats(60.0)} and mixed.buffer_samples == {UTIL: 1}


def test_samples_all_older_than_the_window_leave_it_empty_but_counted():
    store = SampleStore(start=5.0)
    store.add(UTIL, TimedSamples(((2.0, 30.0),)), now=6.0)  # taken at 4.0
    window = store.cut(now=6.0)
    assert window == {} and window.buffer_samples == {UTIL: 0}


def test_the_window_is_a_plain_dict_of_stats_sorted_by_key():
    store = SampleStore(start=0.0)
    store.add(UTIL, 1.0, now=0.0)
    store.add(POWER, 2.0, now=0.0)
    window = store.cut(now=1.0)
    assert list(window) == [POWER, UTIL]
    assert dict(window) == {POWER: _stats(2.0), UTIL: _stats(1.0)}


@pytest.mark.parametrize(("reading", "error"), [("fast", ValueError), (None, TypeError)])
def test_check_reading_refuses_what_is_not_a_number(reading, error):
    with pytest.raises(error):
        check_reading(reading)


def test_check_reading_keeps_timed_samples_and_converts_numbers():
    timed = TimedSamples(((0.0, 1.0),))
    assert check_reading(timed) is timed
    assert check_reading(3) == 3.0 and isinstance(check_reading(3), float)


ENERGY = SampleKey("gpu0", "energy_joules")


def test_increments_add_up_per_window():
    store = SampleStore(start=0.0)
    store.add(ENERGY, Increment(100.0, 1.0, counter=True), now=1.0)
    store.add(ENERGY, Increment(200.0, 1.0, counter=True), now=2.0)
    first = store.cut(now=2.0)
    store.add(ENERGY, Increment(300.0, 1.0, counter=False), now=3.0)
    second = store.cut(now=3.5)
    assert first == {} and first.totals == {ENERGY: WindowTotal(300.0, True)}
    assert second.totals == {ENERGY: WindowTotal(300.0, False)}  # the last increment's kind
    assert store.cut(now=4.0).totals == {}  # nothing accumulated: nothing to report


def test_an_increment_straddling_the_windows_start_counts_the_part_inside():
    store = SampleStore(start=0.0)
    store.cut(now=2.5)
    # 200 J over 2..3: half of it after the window began at 2.5
    store.add(ENERGY, Increment(200.0, 1.0, counter=True), now=3.0)
    # 300 J over 3..4, current half a second before the read at 4.5
    store.add(ENERGY, Increment(300.0, 1.0, counter=True, age=0.5), now=4.5)
    assert store.cut(now=4.5).totals == {ENERGY: WindowTotal(400.0, True)}


def test_an_increment_that_ended_before_the_window_began_is_the_closed_windows():
    store = SampleStore(start=10.0)
    store.add(ENERGY, Increment(40.0, 1.0, counter=False, age=2.0), now=11.0)  # over 8..9
    store.add(ENERGY, Increment(0.0, 0.0, counter=False), now=11.0)  # a starting point
    assert store.cut(now=12.0).totals == {ENERGY: WindowTotal(0.0, False)}
