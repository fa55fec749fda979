"""Finding what to sample: the one place that finds the host and the GPUs this process uses.

The monitor (:func:`default_sources`), ``diagnose``'s GPU-Util probe, ``tfthroughput info`` and
the demo all come here, so they see the same GPUs and degrade the same way: a missing NVML
library, a driver that is not loaded, GPUs that cannot be listed or opened all end up as a
sentence in the result, never as an ``NVMLError``. Each caller decides whether to warn.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from dataclasses import dataclass
from types import ModuleType

from tfthroughput.hardware.gpu_devices import GPUDevice, driver_version, visible_gpus
from tfthroughput.hardware.host import HostSource
from tfthroughput.hardware.metrics import GPU_METRICS, HOST_METRICS
from tfthroughput.hardware.nvml import NVMLUnavailable, nvml
from tfthroughput.hardware.nvml_gpu_source import NVMLGPUSource
from tfthroughput.hardware.source import MonitoringWarning, Source

_GPU_NAMES = frozenset(metric.name for metric in GPU_METRICS)
_HOST_NAMES = frozenset(metric.name for metric in HOST_METRICS)
_NOTHING_VISIBLE = "NVML found no GPU visible to this process (check CUDA_VISIBLE_DEVICES)"


@dataclass(frozen=True)
class GPUs:
    """The GPUs this process uses, as NVML lists them.

    Attributes:
        devices: In TensorFlow's numbering (``devices[i]`` is ``/GPU:i``); empty when none.
        driver_version: The NVIDIA driver's version (``"unknown"`` if NVML cannot tell), or
            ``None`` when NVML itself is unusable.
        reason: Why ``devices`` is empty (no NVML, driver not loaded, nothing visible, ...);
            ``None`` when a GPU was found.
    """

    devices: tuple[GPUDevice, ...]
    driver_version: str | None
    reason: str | None


@dataclass(frozen=True)
class Discovery:
    """What to sample, and what cannot be sampled and why.

    Attributes:
        sources: The host source (if a host metric is wanted), then one source per GPU.
        gpus_off: Why no GPU is sampled at all (the reason of :class:`GPUs`); ``None`` when
            GPUs are sampled or no GPU metric was asked for.
        skipped: One sentence per GPU that was listed but could not be opened.
    """

    sources: tuple[Source, ...]
    gpus_off: str | None
    skipped: tuple[str, ...]


def find_gpus() -> GPUs:
    """List the GPUs this process uses; never raises.

    Returns:
        The devices, the driver version, or the reason there are none.

    Example:
        >>> gpus = find_gpus()
        >>> gpus.reason if not gpus.devices else [gpu.name for gpu in gpus.devices]
        ... # doctest: +SKIP
        'NVML is switched off by TFTHROUGHPUT_DISABLE_NVML'
    """
    return _find_gpus()[0]


def _find_gpus() -> tuple[GPUs, ModuleType | None]:
    """:func:`find_gpus`, plus the initialised ``pynvml`` module when NVML is usable."""
    try:
        pynvml = nvml()
    except NVMLUnavailable as error:
        return GPUs((), None, str(error)), None
    try:
        driver = driver_version(pynvml)
    except pynvml.NVMLError:
        driver = "unknown"
    try:
        devices = tuple(visible_gpus(pynvml))
    except pynvml.NVMLError as error:
        # E.g. the device count itself fails: CUDA's numbering cannot be matched.
        return GPUs((), driver, f"NVML could not list the GPUs ('{error}')"), pynvml
    if not devices:
        return GPUs((), driver, _NOTHING_VISIBLE), pynvml
    return GPUs(devices, driver, None), pynvml


def discover_sources(metrics: Collection[str] | None = None, *, host: bool = True) -> Discovery:
    """The host source plus one NVML source per GPU this process uses; never raises or warns.

    NVML is not even initialised when no GPU metric is asked for.

    Args:
        metrics: Metric names to sample; ``None`` samples everything available.
        host: Whether to include the host source (when a host metric is wanted). Defaults to
            True.

    Returns:
        The sources, and what could not be sampled (see :class:`Discovery`).

    Example:
        >>> discovery = discover_sources(["cpu_percent"])
        >>> [source.name for source in discovery.sources], discovery.gpus_off
        (['host'], None)
    """
    wanted = None if metrics is None else frozenset(metrics)
    sources: list[Source] = []
    if host and (wanted is None or wanted & _HOST_NAMES):
        sources.append(HostSource(wanted))
    if wanted is not None and not wanted & _GPU_NAMES:
        return Discovery(sources=tuple(sources), gpus_off=None, skipped=())
    gpus, pynvml = _find_gpus()
    if not gpus.devices:
        return Discovery(sources=tuple(sources), gpus_off=gpus.reason, skipped=())
    skipped: list[str] = []
    for device in gpus.devices:
        try:
            sources.append(NVMLGPUSource(pynvml, device, wanted))
        except pynvml.NVMLError as error:  # the device failed since it was listed
            skipped.append(
                f"gpu{device.index} (NVML index {device.nvml_index}) is not sampled: NVML "
                f"reports '{error}'; other devices continue"
            )
    return Discovery(sources=tuple(sources), gpus_off=None, skipped=tuple(skipped))


def default_sources(metrics: Collection[str] | None = None) -> list[Source]:
    """What :class:`~tfthroughput.GPUMonitor` samples by default, warning about what it cannot.

    Without NVML (no driver, no library, no GPU) this warns once with the reason and returns
    the host source alone, so host metrics are still logged; a GPU that cannot be opened is
    skipped with one warning and the others are kept.

    Args:
        metrics: Metric names to sample; ``None`` samples everything available.

    Returns:
        The host source (if a host metric is wanted), then one source per GPU.

    Example:
        >>> [source.name for source in default_sources(["cpu_percent", "ram_used_percent"])]
        ['host']
    """
    discovery = discover_sources(metrics)
    if discovery.gpus_off is not None:
        warnings.warn(
            f"GPU metrics are off: {discovery.gpus_off}. Host CPU/RAM metrics are still logged.",
            MonitoringWarning,
            stacklevel=2,
        )
    for sentence in discovery.skipped:
        warnings.warn(sentence, MonitoringWarning, stacklevel=2)
    return list(discovery.sources)
