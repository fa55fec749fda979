"""SM and tensor activity from NVML's GPM counters (Hopper and newer).

GPU-Util says whether any kernel ran; GPM says how much of the GPU the kernels kept busy. GPM
metrics are rates between two GPM samples, so each read reports the activity since the
previous read (the first read reports none).
"""

from __future__ import annotations

GPM_METRICS = ("sm_activity_percent", "tensor_activity_percent")


class GPMActivity:
    """SM and tensor activity of one GPU between consecutive reads.

    Args:
        pynvml: The initialised ``pynvml`` module.
        handle: The device's NVML handle.
    """

    def __init__(self, pynvml, handle) -> None:
        self._nvml = pynvml
        self._handle = handle
        self._samples: list[object] = []
        self._previous = None

    def start(self) -> str | None:
        """Allocate the GPM samples; returns why GPM is unavailable, or None when it works."""
        nvml = self._nvml
        try:
            supported = nvml.nvmlGpmQueryDeviceSupport(self._handle).isSupportedDevice
            if supported:
                self._samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        except (nvml.NVMLError, AttributeError) as error:
            # AttributeError: bindings or a driver too old to know GPM at all.
            return str(error)
        return None if supported else "the GPU does not support GPM (it needs Hopper or newer)"

    def __call__(self, handle) -> dict[str, float]:
        """SM and tensor activity between the previous GPM sample and this one."""
        nvml = self._nvml
        # Two buffers used alternately: the one not holding the previous sample takes this one.
        current = self._samples[1 if self._previous is self._samples[0] else 0]
        nvml.nvmlGpmSampleGet(handle, current)
        previous, self._previous = self._previous, current
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
        for slot, name in enumerate(GPM_METRICS):
            metric = request.metrics[slot]
            if metric.nvmlReturn == nvml.NVML_SUCCESS:
                values[name] = float(metric.value)
        return values

    def close(self) -> None:
        """Free the GPM samples (also when the device is gone)."""
        for sample in self._samples:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except self._nvml.NVMLError:
                pass  # the device may be gone; nothing left to release then
        self._samples = []
