"""Seeing the hardware: NVML and psutil sources, discovery, background sampling, statistics,
the cores a measurement got.

Nothing here imports TensorFlow or Keras, so the core runs under plain Python (and is checked
on machines that have a GPU but no TensorFlow).
"""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "CpuShare": "tfthroughput.hardware.cpu_share",
    "CpuShareMeter": "tfthroughput.hardware.cpu_share",
    "Discovery": "tfthroughput.hardware.discovery",
    "GPUDevice": "tfthroughput.hardware.gpu_devices",
    "HostSource": "tfthroughput.hardware.host",
    "Metric": "tfthroughput.hardware.metrics",
    "MetricStats": "tfthroughput.hardware.stats",
    "MonitoringWarning": "tfthroughput.hardware.source",
    "NVMLGPUSource": "tfthroughput.hardware.nvml_gpu_source",
    "NVMLUnavailable": "tfthroughput.hardware.nvml",
    "SampleKey": "tfthroughput.hardware.window_stats",
    "Sampler": "tfthroughput.hardware.sampler",
    "Source": "tfthroughput.hardware.source",
    "SourceLost": "tfthroughput.hardware.source",
    "TimedSamples": "tfthroughput.hardware.source",
    "WindowStats": "tfthroughput.hardware.window_stats",
    "default_sources": "tfthroughput.hardware.discovery",
    "discover_sources": "tfthroughput.hardware.discovery",
    "find_gpus": "tfthroughput.hardware.discovery",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
