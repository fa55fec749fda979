"""Where samples come from: the source interface, the host source, and the default set.

A source is anything with a ``name`` (the tag prefix, e.g. ``"gpu0"`` or ``"host"``), a
``read()`` returning ``{metric_name: value}`` for what it can measure right now, and
``close()``. Tests inject small fakes with the same three members.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from typing import Protocol, runtime_checkable

from tfthroughput.metrics import GPU_METRICS, HOST_METRICS

_GIB = 1024.0**3


class MonitoringWarning(UserWarning):
    """A monitoring problem that does not stop training (a metric dropped, a GPU lost, ...)."""


class SourceLost(Exception):
    """Raised by ``Source.read`` when the source is gone for good (e.g. the GPU fell off the bus).

    The sampler stops sampling that source and keeps the others.
    """


@runtime_checkable
class Source(Protocol):
    name: str

    def read(self) -> dict[str, float]: ...

    def close(self) -> None: ...


class HostSource:
    """Host CPU and RAM through ``psutil``: system CPU %, this process's CPU % and RSS, RAM %.

    Args:
        metrics: Metric names to report; ``None`` reports all host metrics.
        process: The ``psutil.Process`` to watch. Defaults to the current process.
    """

    name = "host"

    def __init__(self, metrics: Collection[str] | None = None, process=None) -> None:
        import psutil

        self._psutil = psutil
        self._process = process if process is not None else psutil.Process()
        known = {metric.name for metric in HOST_METRICS}
        self._metrics = known if metrics is None else known & set(metrics)
        # psutil's CPU percentages are "since the previous call": prime them so that the first
        # real sample covers one sampling interval rather than returning a meaningless 0.0.
        psutil.cpu_percent(interval=None)
        self._process.cpu_percent(interval=None)

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        if "cpu_percent" in self._metrics:
            values["cpu_percent"] = float(self._psutil.cpu_percent(interval=None))
        if "process_cpu_percent" in self._metrics:
            values["process_cpu_percent"] = float(self._process.cpu_percent(interval=None))
        if "process_rss_gib" in self._metrics:
            values["process_rss_gib"] = self._process.memory_info().rss / _GIB
        if "ram_used_percent" in self._metrics:
            values["ram_used_percent"] = float(self._psutil.virtual_memory().percent)
        return values

    def close(self) -> None:
        pass


def default_sources(metrics: Collection[str] | None = None) -> list[Source]:
    """The host source plus one NVML source per GPU this process uses.

    Without NVML (no driver, no library, no GPU) this warns once with the reason and returns
    the host source alone, so host metrics are still logged.

    Args:
        metrics: Metric names to sample; ``None`` samples everything available.
    """
    from tfthroughput._nvml import NVMLUnavailable, nvml
    from tfthroughput.devices import visible_gpus
    from tfthroughput.nvml_source import NVMLGPUSource

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
