"""Checks against a real NVIDIA GPU and driver; skipped (by the `gpu` marker) without one."""

from __future__ import annotations

import time

import pytest

from tfthroughput.hardware.discovery import default_sources
from tfthroughput.hardware.sampler import SampleKey, Sampler

pytestmark = pytest.mark.gpu


def test_real_gpus_are_sampled_with_plausible_values():
    sources = default_sources()
    gpu_names = [source.name for source in sources if source.name.startswith("gpu")]
    assert gpu_names and gpu_names[0] == "gpu0"
    with Sampler(sources, interval=0.05) as sampler:
        time.sleep(0.5)
        stats = sampler.collect(sample_now=True)
    for name in gpu_names:
        assert 0.0 <= stats[SampleKey(name, "utilization_percent")].mean <= 100.0
        assert 0.0 < stats[SampleKey(name, "memory_used_percent")].max <= 100.0
        assert stats[SampleKey(name, "memory_used_gib")].count >= 5
        if SampleKey(name, "temperature_celsius") in stats:
            assert 0.0 < stats[SampleKey(name, "temperature_celsius")].mean < 120.0


def test_visible_devices_follow_cuda_visible_devices(monkeypatch):
    from tfthroughput.hardware.gpu_devices import visible_gpus
    from tfthroughput.hardware.nvml import nvml

    pynvml = nvml()
    every = visible_gpus(pynvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", every[-1].uuid)
    (only,) = visible_gpus(pynvml)
    assert (only.index, only.uuid) == (0, every[-1].uuid)
