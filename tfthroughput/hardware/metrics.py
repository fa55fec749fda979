"""The catalogue of sampled metrics: names, units and meaning (the README's tag table)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One sampled quantity.

    Attributes:
        name: Identifier used in tags (``gpu0/<name>/mean``) and in ``metrics=`` filters.
        unit: Unit of every sample.
        scope: ``"gpu"`` (one series per visible GPU) or ``"host"`` (one series).
        description: What it measures, for documentation.
    """

    name: str
    unit: str
    scope: str
    description: str


GPU_METRICS: tuple[Metric, ...] = (
    Metric(
        "utilization_percent",
        "%",
        "gpu",
        "NVML GPU-Util: share of each driver sample period in which any kernel was running; "
        "every sample of NVML's buffer in the epoch (point query where there is none).",
    ),
    Metric(
        "memory_utilization_percent",
        "%",
        "gpu",
        "Share of each driver sample period in which device memory was read or written; "
        "from NVML's sample buffer like GPU-Util.",
    ),
    Metric(
        "memory_used_gib",
        "GiB",
        "gpu",
        "Device memory in use (all processes), as nvidia-smi shows it (NVML's v2 query; where "
        "the driver has only v1, this includes the driver's reserved memory).",
    ),
    Metric("memory_used_percent", "%", "gpu", "Device memory in use, as a share of the total."),
    Metric(
        "process_memory_used_gib",
        "GiB",
        "gpu",
        "Device memory used by this process only (NVML's list of compute processes, matched by "
        "PID); absent where NVML does not list this process.",
    ),
    Metric(
        "memory_reserved_gib",
        "GiB",
        "gpu",
        "Device memory the driver reserves for itself (only where NVML's v2 query exists).",
    ),
    Metric(
        "power_watts",
        "W",
        "gpu",
        "Board power draw; from NVML's power sample buffer where the GPU has one.",
    ),
    Metric(
        "energy_joules",
        "J",
        "gpu",
        "Energy used in the epoch: the increase of NVML's energy counter, or sampled power "
        "integrated on boards without it (see energy_joules/from_counter).",
    ),
    Metric("temperature_celsius", "degC", "gpu", "GPU core temperature."),
    Metric("sm_clock_mhz", "MHz", "gpu", "Current SM clock."),
    Metric(
        "sm_activity_percent",
        "%",
        "gpu",
        "GPM (Hopper and newer): share of SMs busy, averaged over the sample period.",
    ),
    Metric(
        "tensor_activity_percent",
        "%",
        "gpu",
        "GPM (Hopper and newer): share of time the SMs ran any tensor-core instruction.",
    ),
)

HOST_METRICS: tuple[Metric, ...] = (
    Metric("cpu_percent", "%", "host", "System-wide CPU utilization, all cores (0-100)."),
    Metric(
        "process_cpu_percent",
        "%",
        "host",
        "CPU used by this process, in percent of one core (can exceed 100).",
    ),
    Metric("process_rss_gib", "GiB", "host", "Resident memory of this process."),
    Metric("ram_used_percent", "%", "host", "System RAM in use."),
)

ALL_METRICS: tuple[Metric, ...] = GPU_METRICS + HOST_METRICS
METRIC_NAMES: frozenset[str] = frozenset(metric.name for metric in ALL_METRICS)


def validate_metric_names(metrics: object) -> frozenset[str] | None:
    """Check a user's ``metrics=`` selection; ``None`` means every metric.

    Raises:
        TypeError: If ``metrics`` is a plain string or not an iterable of strings.
        ValueError: If it names an unknown metric or is empty.
    """
    if metrics is None:
        return None
    if isinstance(metrics, str) or not hasattr(metrics, "__iter__"):
        raise TypeError(
            f"`metrics` must be an iterable of metric names or None. Received: metrics={metrics!r}"
        )
    selected = list(metrics)
    bad_types = [name for name in selected if not isinstance(name, str)]
    if bad_types:
        raise TypeError(f"`metrics` must contain strings. Received: metrics={metrics!r}")
    unknown = sorted(set(selected) - METRIC_NAMES)
    if unknown:
        raise ValueError(
            f"`metrics` names unknown metrics {unknown}; known: {sorted(METRIC_NAMES)}. "
            f"Received: metrics={metrics!r}"
        )
    if not selected:
        raise ValueError(f"`metrics` must name at least one metric. Received: metrics={metrics!r}")
    return frozenset(selected)
