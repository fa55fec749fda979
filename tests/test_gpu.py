"""Checks against a real NVIDIA GPU and driver; skipped (by the `gpu` marker) without one."""

from __future__ import annotations

import time

import pytest

from tfthroughput.sampler import Sampler
from tfthroughput.sources import default_sources

pytestmark = pytest.mark.gpu


def test_real_gpus_are_sampled_with_plausible_values():
    sources = default_sources()
    gpu_names = [source.name for source in sources if source.name.startswith("gpu")]
    assert gpu_names and gpu_names[0] == "gpu0"
    with Sampler(sources, interval=0.05) as sampler:
        time.sleep(0.5)
        stats = sampler.collect(sample_now=True)
    for name in gpu_names:
        assert 0.0 <= stats[f"{name}/utilization_percent"].mean <= 100.0
        assert 0.0 < stats[f"{name}/memory_used_percent"].max <= 100.0
        assert stats[f"{name}/memory_used_gib"].count >= 5
        if f"{name}/temperature_celsius" in stats:
            assert 0.0 < stats[f"{name}/temperature_celsius"].mean < 120.0


def test_visible_devices_follow_cuda_visible_devices(monkeypatch):
    from tfthroughput._nvml import nvml
    from tfthroughput.devices import visible_gpus

    pynvml = nvml()
    every = visible_gpus(pynvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", every[-1].uuid)
    (only,) = visible_gpus(pynvml)
    assert (only.index, only.uuid) == (0, every[-1].uuid)
