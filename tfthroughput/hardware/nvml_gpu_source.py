"""One GPU's metrics through NVML, with NVML's faults mapped to the sampler's rules.

- A query NVML answers "not supported" (power on some boards, most things on MIG) is dropped
  for this device, with one warning per read naming what was dropped; the other queries go on.
- "GPU is lost" raises :class:`~tfthroughput.hardware.source.SourceLost`: the sampler drops
  this device.
- Any other NVML error skips that query for this sample and is warned about once per kind.

Memory comes from NVML's v2 query, whose ``used`` is what ``nvidia-smi`` shows, with the
driver's own reservation apart (``memory_reserved_gib``); a driver without it gets the v1 query,
whose ``used`` includes that reservation. GPU-Util, memory-controller utilization and power
come from NVML's sample buffers where the GPU has them (:mod:`tfthroughput.hardware.gpu_buffer`);
energy from NVML's energy counter, or sampled power where it has none
(:mod:`tfthroughput.hardware.energy`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Collection

from tfthroughput.hardware.energy import EnergyQuery
from tfthroughput.hardware.gpm import GPM_METRICS, GPMActivity
from tfthroughput.hardware.gpu_buffer import BufferedQuery, SampleBuffer
from tfthroughput.hardware.gpu_devices import GPUDevice
from tfthroughput.hardware.metrics import GPU_METRICS
from tfthroughput.hardware.source import MonitoringWarning, Reading, SourceLost, TimedSamples

_GIB = 1024.0**3
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
        device: The GPU, as listed by ``tfthroughput.hardware.find_gpus``.
        metrics: Metric names to report; ``None`` reports all GPU metrics available.
    """

    def __init__(self, pynvml, device: GPUDevice, metrics: Collection[str] | None = None) -> None:
        self._nvml = pynvml
        self.device = device
        self.name = f"gpu{device.index}"
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(device.nvml_index)
        if device.mig_index is not None:  # a MIG slice: its own handle, under its GPU's
            self._handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(
                self._handle, device.mig_index
            )
        wanted = {m.name for m in GPU_METRICS} if metrics is None else set(metrics)
        self._wanted = wanted
        self._explicit_request = metrics is not None
        self._warned: set[str] = set()
        self._gpm = GPMActivity(pynvml, self._handle)
        self._memory_v2 = True
        # "Not supported", or a driver without the function: the metric is dropped.
        self._unsupported_codes = (
            pynvml.NVML_ERROR_NOT_SUPPORTED,
            pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        )
        self._closed = False
        self._energy_power: Query | None = None  # power read for energy alone
        self._results: dict[str, dict[str, Reading]] = {}  # this read's, by query
        self._queries: dict[str, tuple[Query, tuple[str, ...]]] = {}
        for query_name, (query, provides) in self._all_queries().items():
            selected = tuple(name for name in provides if name in wanted)
            if selected:
                self._queries[query_name] = (self._with_buffers(query, selected), selected)
        if "gpm" in self._queries:
            unavailable = self._gpm.start()
            if unavailable is not None:
                del self._queries["gpm"]
                self._warn_if_requested(
                    GPM_METRICS,
                    f"{self.name} ({device.name}): {', '.join(GPM_METRICS)} unavailable: "
                    f"{unavailable}; dropped",
                )
        if "energy" in self._queries:
            try:  # the meter's starting point, so the first window counts from its start
                self._queries["energy"][0](self._handle)
            except pynvml.NVMLError:
                pass  # the first read meets the same error and reports it

    def _all_queries(self) -> dict[str, tuple[Query, tuple[str, ...]]]:
        return {
            "utilization": (
                self._utilization,
                ("utilization_percent", "memory_utilization_percent"),
            ),
            "memory": (self._memory, _MEMORY_METRICS),
            "process_memory": (self._process_memory, ("process_memory_used_gib",)),
            "power": (self._power, ("power_watts",)),
            # after power, whose samples it integrates on boards without an energy counter
            "energy": (EnergyQuery(self._nvml, self._power_samples), ("energy_joules",)),
            "temperature": (self._temperature, ("temperature_celsius",)),
            "sm_clock": (self._sm_clock, ("sm_clock_mhz",)),
            "gpm": (self._gpm, GPM_METRICS),
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
        self._results = {}
        for query_name, (query, selected) in list(self._queries.items()):
            try:
                result = query(self._handle)
            except self._nvml.NVMLError as error:
                if getattr(error, "value", None) in self._unsupported_codes:
                    del self._queries[query_name]
                    unsupported.extend(selected)
                else:
                    self._handle_error(query_name, selected, error)
                continue
            self._results[query_name] = result
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
        self._gpm.close()

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
                    ("memory_reserved_gib",),
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

    def _warn_if_requested(self, metrics: tuple[str, ...], message: str) -> None:
        """Warn about extra metrics that are missing only when the user asked for one."""
        if self._explicit_request and self._wanted.intersection(metrics):
            self._warn_once(metrics[0], message)

    def _process_memory(self, handle) -> dict[str, float]:
        """Memory of this process on the GPU, from NVML's list of compute processes.

        Nothing when the process is not listed: it holds no memory there, or NVML sees it under
        another PID (a container with its own PID namespace).
        """
        nvml = self._nvml
        try:
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except getattr(nvml, "NVMLLibraryMismatchError", ()):  # a driver older than v3
            processes = nvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)
        pid = os.getpid()
        used = [p.usedGpuMemory for p in processes if p.pid == pid and p.usedGpuMemory is not None]
        return {"process_memory_used_gib": sum(used) / _GIB} if used else {}

    def _power(self, handle) -> dict[str, float]:
        return {"power_watts": self._nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0}

    def _power_samples(self, handle) -> list[tuple[float, float]]:
        """This read's power samples as ``(age, watts)``, read for energy if not already."""
        if "power" in self._results:
            reading = self._results["power"].get("power_watts")
        else:  # not read yet, not selected, or just dropped (then this read says why)
            if "power" in self._queries:
                query = self._queries["power"][0]
            else:
                if self._energy_power is None:
                    self._energy_power = self._with_buffers(self._power, ("power_watts",))
                query = self._energy_power
            reading = query(handle).get("power_watts")
        if isinstance(reading, TimedSamples):
            if reading.samples:
                return list(reading.samples)
            reading = reading.fallback
        return [] if reading is None else [(0.0, reading)]

    def _temperature(self, handle) -> dict[str, float]:
        celsius = self._nvml.nvmlDeviceGetTemperature(handle, self._nvml.NVML_TEMPERATURE_GPU)
        return {"temperature_celsius": float(celsius)}

    def _sm_clock(self, handle) -> dict[str, float]:
        clock = self._nvml.nvmlDeviceGetClockInfo(handle, self._nvml.NVML_CLOCK_SM)
        return {"sm_clock_mhz": float(clock)}
