"""The catalogue of sampled metrics: names and units.

The README's "Logged tags" table says what each one means; a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One sampled quantity.

    Attributes:
        name: Identifier used in tags (``gpu0/<name>/mean``) and in ``metrics=`` filters.
        unit: Unit of every sample.
    """

    name: str
    unit: str


# One series per GPU this process uses.
GPU_METRICS: tuple[Metric, ...] = (
    Metric("utilization_percent", "%"),
    Metric("memory_utilization_percent", "%"),
    Metric("memory_used_gib", "GiB"),
    Metric("memory_used_percent", "%"),
    Metric("process_memory_used_gib", "GiB"),
    Metric("memory_reserved_gib", "GiB"),
    Metric("power_watts", "W"),
    Metric("energy_joules", "J"),
    Metric("temperature_celsius", "degC"),
    Metric("sm_clock_mhz", "MHz"),
    Metric("sm_activity_percent", "%"),
    Metric("tensor_activity_percent", "%"),
)

# One series for the host.
HOST_METRICS: tuple[Metric, ...] = (
    Metric("cpu_percent", "%"),
    Metric("process_cpu_percent", "%"),
    Metric("process_rss_gib", "GiB"),
    Metric("ram_used_percent", "%"),
)

ALL_METRICS: tuple[Metric, ...] = GPU_METRICS + HOST_METRICS
METRIC_NAMES: frozenset[str] = frozenset(metric.name for metric in ALL_METRICS)


def validate_metric_names(metrics: object, argument: str = "metrics") -> frozenset[str] | None:
    """Check a user's selection of metric names; ``None`` means every metric.

    Args:
        metrics: The selection as the user passed it.
        argument: The argument's name, for the error message (``GPUMonitor`` calls it
            ``hardware_metrics``, apart from Keras's ``compile(metrics=...)``).

    Raises:
        TypeError: If ``metrics`` is a plain string or not an iterable of strings.
        ValueError: If it names an unknown metric or is empty.
    """
    if metrics is None:
        return None
    if isinstance(metrics, str) or not hasattr(metrics, "__iter__"):
        raise TypeError(
            f"`{argument}` must be an iterable of metric names or None. "
            f"Received: {argument}={metrics!r}"
        )
    selected = list(metrics)
    bad_types = [name for name in selected if not isinstance(name, str)]
    if bad_types:
        raise TypeError(f"`{argument}` must contain strings. Received: {argument}={metrics!r}")
    unknown = sorted(set(selected) - METRIC_NAMES)
    if unknown:
        raise ValueError(
            f"`{argument}` names unknown metrics {unknown}; known: {sorted(METRIC_NAMES)}. "
            f"Received: {argument}={metrics!r}"
        )
    if not selected:
        raise ValueError(
            f"`{argument}` must name at least one metric. Received: {argument}={metrics!r}"
        )
    return frozenset(selected)
