"""GPU utilization over a block of code, for measurements such as ``diagnose``."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterable, Iterator

from tfthroughput.hardware.discovery import discover_sources
from tfthroughput.hardware.sampler import Sampler
from tfthroughput.hardware.source import Source


@contextlib.contextmanager
def gpu_utilization(
    interval: float = 0.1, *, sources: Iterable[Source] | None = None
) -> Iterator[Callable[[], float | None]]:
    """Sample GPU-Util during a ``with`` block; the yielded callable gives the mean afterwards.

    The mean is over every sample of every GPU this process uses, in percent. Without NVML
    (no driver, no GPU) nothing is sampled, no warning is given, and the result is ``None``.

    Args:
        interval: Seconds between samples. Defaults to 0.1.
        sources: The GPU sources to sample; defaults to every GPU visible to this process.

    Example:
        >>> with gpu_utilization() as mean_utilization:  # doctest: +SKIP
        ...     model.fit(dataset, epochs=1)
        >>> mean_utilization()  # doctest: +SKIP
        87.5

        On a machine without an NVIDIA GPU, or with no GPU to sample, the result is ``None``:

        >>> with gpu_utilization(sources=[]) as mean_utilization:
        ...     total = sum(range(1000))
        >>> print(mean_utilization())
        None
    """
    gpu_sources = list(sources) if sources is not None else _visible_gpu_sources()
    result: list[float | None] = []
    if not gpu_sources:
        yield lambda: None
        return
    with Sampler(gpu_sources, interval) as sampler:
        yield lambda: result[0] if result else None
        stats = sampler.collect(sample_now=True)
    means = [value.mean for key, value in stats.items() if key.metric == "utilization_percent"]
    result.append(statistics.fmean(means) if means else None)


def _visible_gpu_sources() -> list[Source]:
    # Quiet on purpose: a measurement aid, whose "no GPU" answer is the None it returns.
    return list(discover_sources(["utilization_percent"], host=False).sources)
