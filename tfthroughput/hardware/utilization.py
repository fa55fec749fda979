"""GPU utilization over a block of code, for measurements such as ``diagnose``."""

from __future__ import annotations

import contextlib
import statistics
import warnings
from collections.abc import Iterable, Iterator

from tfthroughput.hardware.activity import SM_ACTIVITY, UTILIZATION
from tfthroughput.hardware.discovery import discover_sources
from tfthroughput.hardware.sampler import Sampler
from tfthroughput.hardware.source import MonitoringWarning, Source
from tfthroughput.hardware.stats import MetricStats


class UtilizationReading:
    """What :func:`gpu_utilization` yields: the block's means, known once it has ended.

    Calling it gives the mean GPU-Util (the value ``diagnose``'s ``utilization_probe``
    protocol asks for); :meth:`sm_activity` gives the mean GPM SM activity where the GPUs
    report it (Hopper and newer), which tells how much of that "busy" time did real work.
    Both are ``None`` before the block ends and when nothing was measured.
    """

    def __init__(self) -> None:
        self._means: dict[str, float] = {}

    def __call__(self) -> float | None:
        """Mean GPU-Util over every sample of every GPU, in percent, or ``None``."""
        return self._means.get(UTILIZATION)

    def sm_activity(self) -> float | None:
        """Mean GPM SM activity over every sample of every GPU that reports it, or ``None``."""
        return self._means.get(SM_ACTIVITY)

    def _record(self, stats: Iterable[tuple[str, MetricStats]]) -> None:
        per_metric: dict[str, list[float]] = {}
        for metric, value in stats:
            per_metric.setdefault(metric, []).append(value.mean)
        self._means = {metric: statistics.fmean(means) for metric, means in per_metric.items()}


@contextlib.contextmanager
def gpu_utilization(
    interval: float = 0.1, *, sources: Iterable[Source] | None = None
) -> Iterator[UtilizationReading]:
    """Sample GPU-Util (and SM activity where GPM exists) during a ``with`` block.

    The yielded :class:`UtilizationReading` gives the means afterwards: called, the mean
    GPU-Util over every sample of every GPU this process uses, in percent; its
    ``sm_activity()``, the mean SM activity of the GPUs that report it. Without NVML (no
    driver, no GPU) nothing is sampled, no warning is given, and both are ``None``.

    Args:
        interval: Seconds between samples. Defaults to 0.1.
        sources: The GPU sources to sample; defaults to every GPU visible to this process.

    Example:
        >>> with gpu_utilization() as reading:  # doctest: +SKIP
        ...     model.fit(dataset, epochs=1)
        >>> reading(), reading.sm_activity()  # doctest: +SKIP
        (23.6, 0.5)

        On a machine without an NVIDIA GPU, or with no GPU to sample, both are ``None``:

        >>> with gpu_utilization(sources=[]) as reading:
        ...     total = sum(range(1000))
        >>> print(reading(), reading.sm_activity())
        None None
    """
    gpu_sources = list(sources) if sources is not None else _visible_gpu_sources()
    reading = UtilizationReading()
    if not gpu_sources:
        yield reading
        return
    with Sampler(gpu_sources, interval) as sampler:
        yield reading
        stats = sampler.collect(sample_now=True)
    reading._record(
        (key.metric, value)
        for key, value in stats.items()
        if key.metric in (UTILIZATION, SM_ACTIVITY)
    )


def _visible_gpu_sources() -> list[Source]:
    # Quiet on purpose: a measurement aid, whose "no GPU" answer is the None it returns, and
    # whose "no GPM on this GPU" (before Hopper) is the None of `sm_activity()`.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MonitoringWarning)
        return list(discover_sources([UTILIZATION, SM_ACTIVITY], host=False).sources)
