"""Host CPU and RAM through ``psutil``."""

from __future__ import annotations

from collections.abc import Collection

from tfthroughput.hardware.metrics import HOST_METRICS

_GIB = 1024.0**3


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
