"""``GPUMonitor``'s argument checks: each raises early, naming the argument and the value."""

from __future__ import annotations

import os

from tfthroughput.hardware.stats import STATISTIC_NAMES
from tfthroughput.monitor.epoch_windows import UpdateFrequency, parse_update_freq

LOGGED_STATISTICS = ("mean", "min", "max", "p95")


def check_log_dir(log_dir: object) -> str:
    """``log_dir`` as a string; whether it can be written is checked when ``fit`` starts."""
    if not isinstance(log_dir, (str, os.PathLike)):
        raise TypeError(f"`log_dir` must be a path. Received: log_dir={log_dir!r}")
    return os.fspath(log_dir)


def check_update_freq(update_freq: object, interval: float) -> UpdateFrequency:
    """``update_freq`` parsed; a duration must be at least ``interval``, since a time-based
    window ends after a sample."""
    update = parse_update_freq(update_freq)
    if update.seconds is not None and update.seconds < interval:
        raise ValueError(
            "`update_freq` must be at least `interval`: a window ends after a sample. "
            f"Received: update_freq={update_freq!r}, interval={interval!r}"
        )
    return update


def check_statistics(statistics: object) -> tuple[str, ...]:
    """``statistics`` as a tuple of names from ``mean``, ``min``, ``max``, ``p95``."""
    if isinstance(statistics, str) or not isinstance(statistics, (list, tuple)):
        raise TypeError(
            f"`statistics` must be a list or tuple of names. Received: statistics={statistics!r}"
        )
    allowed = [name for name in STATISTIC_NAMES if name != "count"]
    unknown = [name for name in statistics if name not in allowed]
    if unknown or not statistics:
        raise ValueError(
            f"`statistics` must be a non-empty subset of {allowed}. "
            f"Received: statistics={statistics!r}"
        )
    return tuple(statistics)


def check_source_factory(sources: object) -> None:
    if sources is not None and not callable(sources):
        raise TypeError(
            "`sources` must be a zero-argument callable returning sources. "
            f"Received: sources={sources!r}"
        )
