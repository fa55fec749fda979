"""One GPU's metrics through NVML, with NVML's faults mapped to the sampler's rules.

- A query NVML answers "not supported" (power on some boards, most things on MIG) is dropped
  for this device, with one warning per read naming what was dropped; the other queries go on.
- "GPU is lost" raises :class:`~tfthroughput.hardware.source.SourceLost`: the sampler drops
  this device.
- Any other NVML error skips that query for this sample and is warned about once per kind.

Memory comes from NVML's v2 query, whose ``used`` is what ``nvidia-smi`` shows, with the
driver's own reservation apart (``memory_reserved_gib``); a driver without it gets the v1 query,
whose ``used`` includes that reservation. GPU-Util, memory-controller utilization and power
come from NVML's sample buffers where the GPU has them (:mod:`tfthroughput.hardware.gpu_buffer`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection

from tfthroughput.hardware.devices import GPUDevice
from tfthroughput.hardware.gpu_buffer import BufferedQuery, SampleBuffer
from tfthroughput.hardware.metrics import GPU_METRICS
from tfthroughput.hardware.source import MonitoringWarning, Reading, SourceLost

_GIB = 1024.0**3
_GPM_METRICS = ("sm_activity_percent", "tensor_activity_percent")
_MEMORY_METRICS = ("memory_used_gib", "memory_used_percent", "memory_reserved_gib")

# Metrics NVML also keeps in a sample buffer: pynvml's sampling type, and the factor to the
# metric's unit.
_BUFFERS = {
    "utilization_percent": ("NVML_GPU_UTILIZATION_SAMPLES", 1.0),
    "memory_utilization_percent": ("NVML_MEMORY_UTILIZATION_SAMPLES", 1.0),
    "power_watts": ("NVML_TOTAL_POWER_SAMPLES", 0.001),  # milliwatts
}

Query = Callable[[object], dict[str, Reading]]


class NVMLGPUSource:
    """Samples one GPU.

    Args:
        pynvml: The initialised ``pynvml`` module (see ``tfthroughput.hardware.nvml.nvml``).
        device: The GPU, as listed by ``tfthroughput.hardware.devices.visible_gpus``.
        metrics: Metric names to report; ``None`` reports all GPU metrics available.
    """

    def __init__(self, pynvml, device: GPUDevice, metrics: Collection[str] | None = None) -> None:
        self._nvml = pynvml
        self.device = device
        self.name = f"gpu{device.index}"
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(device.nvml_index)
        wanted = {m.name for m in GPU_METRICS} if metrics is None else set(metrics)
        self._wanted = wanted
        self._explicit_request = metrics is not None
        self._warned: set[str] = set()
        self._gpm_samples: list[object] = []
        self._gpm_previous = None
        self._memory_v2 = True
        self._closed = False
        self._queries: dict[str, tuple[Query, tuple[str, ...]]] = {}
        for query_name, (query, provides) in self._all_queries().items():
            selected = tuple(name for name in provides if name in wanted)
            if selected:
                self._queries[query_name] = (self._with_buffers(query, selected), selected)
        if "gpm" in self._queries and not self._start_gpm():
            del self._queries["gpm"]

    def _all_queries(self) -> dict[str, tuple[Query, tuple[str, ...]]]:
        return {
            "utilization": (
                self._utilization,
                ("utilization_percent", "memory_utilization_percent"),
            ),
            "memory": (self._memory, _MEMORY_METRICS),
            "power": (self._power, ("power_watts",)),
            "temperature": (self._temperature, ("temperature_celsius",)),
            "sm_clock": (self._sm_clock, ("sm_clock_mhz",)),
            "gpm": (self._gpm, _GPM_METRICS),
        }

    def _with_buffers(self, query: Query, selected: tuple[str, ...]) -> Query:
        """``query``, reading the selected metrics NVML keeps a sample buffer of from it."""
        nvml = self._nvml
        buffers = {}
        for name in selected:
            if name in _BUFFERS and hasattr(nvml, "nvmlDeviceGetSamples"):
                sampling_type, scale = _BUFFERS[name]
                buffers[name] = SampleBuffer(
                    nvml, self._handle, getattr(nvml, sampling_type), scale
                )
        return BufferedQuery(nvml, query, buffers) if buffers else query

    def read(self) -> dict[str, Reading]:
        """One reading of every selected metric NVML answers for this GPU.

        Raises:
            SourceLost: When NVML reports the GPU lost.
            RuntimeError: When the source was closed.
        """
        if self._closed:
            raise RuntimeError(
                f"{self.name} ({self.device.name}) was closed; create a new source to read it"
            )
        values: dict[str, Reading] = {}
        unsupported: list[str] = []
        for query_name, (query, selected) in list(self._queries.items()):
            try:
                result = query(self._handle)
            except self._nvml.NVMLError as error:
                if getattr(error, "value", None) == self._nvml.NVML_ERROR_NOT_SUPPORTED:
                    del self._queries[query_name]
                    unsupported.extend(selected)
                else:
                    self._handle_error(query_name, selected, error)
                continue
            values.update((name, result[name]) for name in selected if name in result)
        if unsupported:
            names = ", ".join(unsupported)
            self._warn_once(
                f"unsupported:{names}",
                f"{self.name} ({self.device.name}): NVML does not support {names} on this "
                "device; dropped, other metrics continue",
            )
        return values

    def close(self) -> None:
        self._closed = True
        for sample in self._gpm_samples:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except self._nvml.NVMLError:
                pass  # the device may be gone; nothing left to release then
        self._gpm_samples = []

    def _handle_error(self, query_name: str, selected: tuple[str, ...], error) -> None:
        code = getattr(error, "value", None)
        if code == self._nvml.NVML_ERROR_GPU_IS_LOST:
            raise SourceLost(
                f"{self.name} ({self.device.name}, {self.device.uuid}): NVML reports "
                f"'{error}'; it is no longer sampled, other devices continue"
            ) from error
        self._warn_once(
            f"{query_name}:{code}",
            f"{self.name}: reading {', '.join(selected)} failed ({error}); skipped this sample",
        )

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, MonitoringWarning, stacklevel=2)

    def _utilization(self, handle) -> dict[str, float]:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        return {
            "utilization_percent": float(rates.gpu),
            "memory_utilization_percent": float(rates.memory),
        }

    def _memory(self, handle) -> dict[str, float]:
        nvml = self._nvml
        values = {}
        memory = None
        if self._memory_v2:
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
                values["memory_reserved_gib"] = memory.reserved / _GIB
            except (nvml.NVMLError, AttributeError) as error:
                # AttributeError: bindings too old to know v2. Any error that says "this driver
                # has no v2" moves to v1 for good; others are the query's own failure.
                if getattr(error, "value", None) not in self._v2_missing_codes():
                    raise
                self._memory_v2 = False
                self._warn_if_requested(
                    "memory_reserved_gib",
                    f"{self.name} ({self.device.name}): memory_reserved_gib unavailable: the "
                    f"driver has no v2 memory query ({error}); dropped",
                )
        if memory is None:
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        values["memory_used_gib"] = memory.used / _GIB
        values["memory_used_percent"] = 100.0 * memory.used / memory.total if memory.total else 0.0
        return values

    def _v2_missing_codes(self) -> tuple[int | None, ...]:
        nvml = self._nvml
        return (
            None,  # AttributeError
            nvml.NVML_ERROR_NOT_SUPPORTED,
            nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        )

    def _warn_if_requested(self, metric: str, message: str) -> None:
        """Warn about an extra metric that is missing only when the user asked for it."""
        if self._explicit_request and metric in self._wanted:
            self._warn_once(metric, message)

    def _power(self, handle) -> dict[str, float]:
        return {"power_watts": self._nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0}

    def _temperature(self, handle) -> dict[str, float]:
        celsius = self._nvml.nvmlDeviceGetTemperature(handle, self._nvml.NVML_TEMPERATURE_GPU)
        return {"temperature_celsius": float(celsius)}

    def _sm_clock(self, handle) -> dict[str, float]:
        clock = self._nvml.nvmlDeviceGetClockInfo(handle, self._nvml.NVML_CLOCK_SM)
        return {"sm_clock_mhz": float(clock)}

    def _start_gpm(self) -> bool:
        """Allocate GPM samples if this GPU supports GPM (Hopper and newer)."""
        nvml = self._nvml
        try:
            supported = nvml.nvmlGpmQueryDeviceSupport(self._handle).isSupportedDevice
            if supported:
                self._gpm_samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        except (nvml.NVMLError, AttributeError) as error:
            # AttributeError: bindings or a driver too old to know GPM at all.
            reason = str(error)
        else:
            reason = "the GPU does not support GPM (it needs Hopper or newer)"
            if supported:
                return True
        if self._explicit_request:
            self._warn_once(
                "gpm",
                f"{self.name} ({self.device.name}): {', '.join(_GPM_METRICS)} unavailable: "
                f"{reason}; dropped",
            )
        return False

    def _gpm(self, handle) -> dict[str, float]:
        """SM and tensor activity between the previous GPM sample and this one."""
        nvml = self._nvml
        # Two buffers used alternately: the one not holding the previous sample takes this one.
        current = self._gpm_samples[1 if self._gpm_previous is self._gpm_samples[0] else 0]
        nvml.nvmlGpmSampleGet(handle, current)
        previous, self._gpm_previous = self._gpm_previous, current
        if previous is None:
            return {}  # GPM metrics are rates between two samples: the first gives none
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 2
        request.sample1 = previous
        request.sample2 = current
        request.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
        request.metrics[1].metricId = nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
        nvml.nvmlGpmMetricsGet(request)
        values = {}
        for slot, name in enumerate(_GPM_METRICS):
            metric = request.metrics[slot]
            if metric.nvmlReturn == nvml.NVML_SUCCESS:
                values[name] = float(metric.value)
        return values
