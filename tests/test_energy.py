from __future__ import annotations

import pytest
from fakes import FakeClock

from tfthroughput.hardware.energy import EnergyMeter
from tfthroughput.hardware.source import Increment


def test_the_counter_gives_the_joules_between_readings_and_the_span():
    clock = FakeClock(10.0)
    meter = EnergyMeter(clock)
    increments = []
    for mj in (5_000_000, 5_150_000, 5_400_000):
        increments.append(meter.from_counter(mj))
        clock.advance(0.5)
    assert increments == [
        Increment(0.0, 0.0, counter=True),  # the starting point
        Increment(150.0, 0.5, counter=True),
        Increment(250.0, 0.5, counter=True),
    ]


def test_a_counter_that_restarts_counts_what_it_counted_since():
    meter = EnergyMeter(FakeClock())
    amounts = [meter.from_counter(mj).amount for mj in (9_000_000, 9_100_000, 40_000, 90_000)]
    assert amounts == [0.0, 100.0, 40.0, 50.0]  # driver reloaded after 9.1e6 mJ


def test_a_counter_that_wraps_past_64_bits_keeps_counting():
    meter = EnergyMeter(FakeClock())
    meter.from_counter(2**64 - 30_000)
    assert meter.from_counter(20_000).amount == 50.0


def test_without_the_counter_power_is_integrated_at_the_samples_times():
    clock = FakeClock(100.0)
    meter = EnergyMeter(clock)
    assert meter.from_power([]) is None
    # Read at 100: samples taken at 99.5 (100 W) and 100 (200 W)
    first = meter.from_power([(0.5, 100.0), (0.0, 200.0)])
    assert first == Increment(0.5 * 150.0, 0.5, counter=False, age=0.0)
    clock.advance(1.0)
    # Read at 101: the newest sample is 0.25 s old; one already integrated comes again
    second = meter.from_power([(1.0, 200.0), (0.75, 200.0), (0.25, 400.0)])
    assert second.amount == pytest.approx(0.25 * 200.0 + 0.5 * 300.0)
    assert (second.seconds, second.counter, second.age) == (0.75, False, 0.25)
    clock.advance(0.5)
    assert meter.from_power([]) == Increment(0.0, 0.0, counter=False, age=0.75)


def test_a_single_first_power_sample_only_starts_the_meter():
    clock = FakeClock(5.0)
    meter = EnergyMeter(clock)
    assert meter.from_power([(0.0, 150.0)]) == Increment(0.0, 0.0, counter=False)
    clock.advance(2.0)
    assert meter.from_power([(0.0, 150.0)]) == Increment(300.0, 2.0, counter=False)
