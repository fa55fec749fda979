"""Finding what to sample: the host, and every GPU this process uses through NVML."""

from __future__ import annotations

import warnings
from collections.abc import Collection

from tfthroughput.hardware.devices import visible_gpus
from tfthroughput.hardware.gpu import NVMLGPUSource
from tfthroughput.hardware.host import HostSource
from tfthroughput.hardware.metrics import GPU_METRICS, HOST_METRICS
from tfthroughput.hardware.nvml import NVMLUnavailable, nvml
from tfthroughput.hardware.source import MonitoringWarning, Source


def default_sources(metrics: Collection[str] | None = None) -> list[Source]:
    """The host source plus one NVML source per GPU this process uses.

    Without NVML (no driver, no library, no GPU) this warns once with the reason and returns
    the host source alone, so host metrics are still logged.

    Args:
        metrics: Metric names to sample; ``None`` samples everything available.
    """
    sources: list[Source] = []
    host_names = {metric.name for metric in HOST_METRICS}
    if metrics is None or host_names & set(metrics):
        sources.append(HostSource(metrics))
    gpu_names = {metric.name for metric in GPU_METRICS}
    if metrics is not None and not gpu_names & set(metrics):
        return sources
    try:
        pynvml = nvml()
    except NVMLUnavailable as error:
        warnings.warn(
            f"GPU metrics are off: {error}. Host CPU/RAM metrics are still logged.",
            MonitoringWarning,
            stacklevel=2,
        )
        return sources
    try:
        devices = visible_gpus(pynvml)
    except pynvml.NVMLError as error:
        # E.g. a GPU already lost: its UUID cannot be read, so CUDA's numbering cannot be
        # matched. Sampling must never stop training, so fall back to the host alone.
        warnings.warn(
            f"GPU metrics are off: NVML could not list the GPUs ('{error}'). Host CPU/RAM "
            "metrics are still logged.",
            MonitoringWarning,
            stacklevel=2,
        )
        return sources
    if not devices:
        warnings.warn(
            "GPU metrics are off: NVML found no GPU visible to this process (check "
            "CUDA_VISIBLE_DEVICES). Host CPU/RAM metrics are still logged.",
            MonitoringWarning,
            stacklevel=2,
        )
    for device in devices:
        try:
            sources.append(NVMLGPUSource(pynvml, device, metrics))
        except pynvml.NVMLError as error:  # the device failed since it was listed
            warnings.warn(
                f"gpu{device.index} (NVML index {device.nvml_index}) is not sampled: NVML "
                f"reports '{error}'; other devices continue",
                MonitoringWarning,
                stacklevel=2,
            )
    return sources
