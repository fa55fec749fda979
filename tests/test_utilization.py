from __future__ import annotations

from fakes import FakeSource

from tfthroughput.utilization import gpu_utilization


def test_mean_over_every_gpu_and_sample_is_available_after_the_block():
    sources = [
        FakeSource("gpu0", {"utilization_percent": 30.0}),
        FakeSource("gpu1", {"utilization_percent": 50.0}),
    ]
    with gpu_utilization(0.05, sources=sources) as mean_utilization:
        assert mean_utilization() is None  # not known before the block ends
    assert mean_utilization() == 40.0
    assert all(source.closed for source in sources)


def test_without_nvml_it_measures_nothing_and_stays_quiet(recwarn):
    # This machine has no NVML library.
    with gpu_utilization(0.05) as mean_utilization:
        pass
    assert mean_utilization() is None
    assert len(recwarn) == 0
