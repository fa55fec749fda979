"""Read the runs ``GPUMonitor`` wrote under a log folder into one comparison.

Event files are read with TensorBoard's own reader (``EventAccumulator``), which needs no
TensorFlow: without it TensorBoard falls back to its pure-Python stub. What is read becomes a
frozen :class:`RunComparison`; drawing it is :mod:`tfthroughput.report.html`'s job.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tfthroughput.hardware.metrics import ALL_METRICS
from tfthroughput.report.folder_events import FolderEvents, load_folder_events
from tfthroughput.report.steady_epochs import Speedup, speedup, steady_label, steady_median

# GPUMonitor's default `run_name`: such a run is named after the folder that holds it.
MONITOR_RUN_NAME = "hardware"
_HARDWARE_TAG = re.compile(
    r"^((gpu\d+|host)/\w+/(mean|min|max|p95)|epoch/(seconds|steps_per_second|examples_per_second))$"
)


@dataclass(frozen=True)
class Quantity:
    """One compared quantity: a chart in the report and one table row per source.

    Attributes:
        title: What the report calls it, e.g. ``"GPU-Util"``.
        pattern: Regular expression of its tags; group 1, when present, names the source
            (``gpu0``) so each GPU gets its own line and row.
        unit: Unit of every value.
        absent: Why a run may lack it, said when no run has it.
        plotted: Whether the report draws it (``steps/s`` is tabled only).
        compared_by_ratio: Whether a ratio to the baseline means something: throughput and
            time do; a percentage or memory in use does not (twice the host CPU is not twice
            as good, and 100 % cannot double).
    """

    title: str
    pattern: str
    unit: str
    absent: str
    plotted: bool = True
    compared_by_ratio: bool = False

    def source_of(self, tag: str) -> str | None:
        """The source a tag belongs to (``""`` for run-wide tags), or None if not this one."""
        match = re.fullmatch(self.pattern, tag)
        if match is None:
            return None
        return match.group(1) if match.groups() else ""


_UNITS = {metric.name: metric.unit for metric in ALL_METRICS}
_NO_GPU = "no GPU was sampled (no NVIDIA GPU, driver or NVML library)"

QUANTITIES: tuple[Quantity, ...] = (
    Quantity(
        "GPU-Util", r"(gpu\d+)/utilization_percent/mean", _UNITS["utilization_percent"], _NO_GPU
    ),
    Quantity(
        "SM activity",
        r"(gpu\d+)/sm_activity_percent/mean",
        _UNITS["sm_activity_percent"],
        "no GPU was sampled, or none with NVML's GPM counters (Hopper and newer)",
    ),
    Quantity(
        "GPU memory used", r"(gpu\d+)/memory_used_gib/mean", _UNITS["memory_used_gib"], _NO_GPU
    ),
    Quantity(
        "host CPU",
        r"(host)/cpu_percent/mean",
        _UNITS["cpu_percent"],
        "host metrics were not sampled",
    ),
    # The share of the epoch the loop waited for its next batch (tfthroughput.monitor.input_wait).
    Quantity(
        "input wait",
        r"input/wait_percent",
        "%",
        "GPUMonitor logs it (input/wait_percent) from the version that measures the input wait",
    ),
    Quantity(
        "examples/s",
        r"epoch/examples_per_second",
        "examples/s",
        "GPUMonitor logs it only when given batch_size",
        compared_by_ratio=True,
    ),
    Quantity(
        "steps/s",
        r"epoch/steps_per_second",
        "steps/s",
        "not logged",
        plotted=False,
        compared_by_ratio=True,
    ),
    # Training steps only: GPUMonitor measures an epoch's validation apart (validation/...).
    Quantity("training time", r"epoch/seconds", "s", "not logged", compared_by_ratio=True),
    Quantity(
        "epoch wall time",
        r"epoch/wall_seconds",
        "s",
        "GPUMonitor logs it from the version that measures validation apart",
        plotted=False,
        compared_by_ratio=True,
    ),
)


@dataclass(frozen=True)
class Run:
    """One ``GPUMonitor`` run.

    Attributes:
        name: Its folder relative to the log folder, without GPUMonitor's ``/hardware``.
        path: The folder holding its hardware event files.
        scalars: ``{tag: ((epoch, value), ...)}`` for every scalar tag, by epoch.
        diagnosis: The latest ``diagnosis/report`` text written in this run's folder (see
            :func:`compare_runs`), or None.
    """

    name: str
    path: str
    scalars: Mapping[str, tuple[tuple[int, float], ...]]
    diagnosis: str | None = None

    @property
    def epochs(self) -> int:
        """Epochs the run logged (the longest of its per-epoch tags; windows not counted)."""
        return max(
            (len(points) for tag, points in self.scalars.items() if _HARDWARE_TAG.match(tag)),
            default=0,
        )

    def median(self, tag: str) -> float | None:
        """:func:`steady_median` of a tag over the run's epochs, or None if it has no such tag."""
        points = self.scalars.get(tag)
        return steady_median([value for _, value in points]) if points else None


@dataclass(frozen=True)
class Row:
    """One line of the comparison table.

    Attributes:
        quantity: What the row measures.
        source: ``gpu<i>``, ``host`` or ``""`` (run-wide).
        tag: The TensorBoard tag whose per-epoch values the medians are taken over.
        medians: One per run, in the comparison's order (None where a run lacks the tag).
        ratios: Each median over the first run's (None where either is missing or zero, and
            for a quantity not compared by ratio).
    """

    quantity: Quantity
    source: str
    tag: str
    medians: tuple[float | None, ...]
    ratios: tuple[float | None, ...]


@dataclass(frozen=True)
class RunComparison:
    """The runs under a log folder, the first one the baseline.

    Attributes:
        log_dir: The folder that was searched.
        runs: Runs with hardware tags, in the order they were first written.
        rows: The comparison table, quantity by quantity (:data:`QUANTITIES` order); each
            median is :func:`~tfthroughput.report.steady_epochs.steady_median` of the run's
            epochs (the first epoch left out when there are two or more).
        tunings: ``(folder, table)`` of the latest ``tune/result`` text in each folder under
            ``log_dir`` (any folder, monitored or not), by folder name.
    """

    log_dir: str
    runs: tuple[Run, ...]
    rows: tuple[Row, ...]
    tunings: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """Which epochs the medians are, as :func:`steady_label` states them."""
        return steady_label(max((run.epochs for run in self.runs), default=0))

    def speedups(self) -> tuple[Speedup, ...]:
        """Each later run's examples/s (else steps/s) over the first run's, where both exist."""
        by_tag = {row.tag: row for row in self.rows}
        for tag, unit in (
            ("epoch/examples_per_second", "examples/s"),
            ("epoch/steps_per_second", "steps/s"),
        ):
            row = by_tag.get(tag)
            if row is None:
                continue
            base = [value for _, value in self.runs[0].scalars.get(tag, ())]
            found = []
            for run, ratio in zip(self.runs[1:], row.ratios[1:], strict=True):
                values = [value for _, value in run.scalars.get(tag, ())]
                if ratio is None:
                    continue
                if values and base:  # the range their epochs allow
                    found.append(
                        replace(
                            speedup(run.name, "", values, base, unit),
                            **{"baseline": self.runs[0].name, "ratio": ratio, "label": self.label},
                        )
                    )
                else:
                    found.append(Speedup(run.name, self.runs[0].name, ratio, unit, self.label))
            return tuple(found)
        return ()

    def series(self, quantity: Quantity) -> list[tuple[Run, str, tuple[tuple[int, float], ...]]]:
        """``(run, source, points)`` for every line of ``quantity``'s chart."""
        lines = []
        for run in self.runs:
            for tag, points in sorted(run.scalars.items()):
                source = quantity.source_of(tag)
                if source is not None:
                    lines.append((run, source, points))
        return lines


def compare_runs(log_dir: str | os.PathLike) -> RunComparison:
    """Read every ``GPUMonitor`` run under ``log_dir`` and compare their per-epoch medians.

    A run is a folder whose event files hold hardware tags (``gpu<i>/<metric>/<stat>``,
    ``host/...``, ``epoch/seconds``, ...); folders without them (Keras's ``train`` and
    ``validation``) are left out. A run's diagnosis is the latest ``diagnosis/report`` text
    under its folder or, for a run in GPUMonitor's default ``hardware`` folder, under the folder
    above it (the ``log_dir`` given to ``GPUMonitor``), unless a nearer run claims it.

    Args:
        log_dir: A TensorBoard log folder.

    Returns:
        The comparison, runs in the order they were first written (the first is the baseline).

    Raises:
        FileNotFoundError: If ``log_dir`` does not exist.
        NotADirectoryError: If it is not a folder.
        ValueError: If it holds no event files, or none with hardware tags.

    Example:
        >>> comparison = compare_runs("logs/tfthroughput-demo")  # doctest: +SKIP
        >>> [run.name for run in comparison.runs]  # doctest: +SKIP
        ['naive', 'build_pipeline']
    """
    from tensorboard.backend.event_processing import io_wrapper

    log_dir = os.fspath(log_dir)
    if not os.path.exists(log_dir):
        raise FileNotFoundError(f"no such folder: {log_dir!r}")
    if not os.path.isdir(log_dir):
        raise NotADirectoryError(f"not a folder: {log_dir!r}")
    folders = sorted(io_wrapper.GetLogdirSubdirectories(log_dir))
    if not folders:
        raise ValueError(f"no TensorBoard event files under {log_dir!r}")
    loaded = {folder: load_folder_events(folder) for folder in folders}
    hardware = [folder for folder, events in loaded.items() if _has_hardware(events.scalars)]
    if not hardware:
        found = ", ".join(_relative(folder, log_dir) for folder in folders)
        raise ValueError(
            f"no run under {log_dir!r} has GPUMonitor's hardware tags (runs found: {found}); "
            f"GPUMonitor writes them into <log_dir>/{MONITOR_RUN_NAME}"
        )
    hardware.sort(key=lambda folder: (loaded[folder].first_written, folder))
    diagnoses = _assign_diagnoses(hardware, loaded)
    runs = tuple(
        Run(_run_name(folder, log_dir), folder, loaded[folder].scalars, diagnoses.get(folder))
        for folder in hardware
    )
    tunings = tuple(
        (_relative(folder, log_dir), events.tuning[1])
        for folder, events in sorted(loaded.items())
        if events.tuning is not None
    )
    return RunComparison(log_dir, runs, _rows(runs), tunings)


def _has_hardware(scalars: Mapping[str, object]) -> bool:
    return any(_HARDWARE_TAG.match(tag) for tag in scalars)


def _home(run_folder: str) -> str:
    """The folder a run's diagnosis may sit under (``log_dir`` for a ``hardware`` run)."""
    if os.path.basename(run_folder) == MONITOR_RUN_NAME:
        return os.path.dirname(run_folder)
    return run_folder


def _assign_diagnoses(hardware: list[str], loaded: Mapping[str, FolderEvents]) -> dict[str, str]:
    """Each diagnosis goes to the run whose home folder is its nearest; the latest one wins."""
    found: dict[str, tuple[float, str]] = {}
    for folder, events in loaded.items():
        owners = [run for run in hardware if _within(folder, _home(run))]
        if events.diagnosis is None or not owners:
            continue
        owner = max(owners, key=lambda run: len(os.path.abspath(_home(run))))
        if owner not in found or events.diagnosis[0] >= found[owner][0]:
            found[owner] = events.diagnosis
    return {run: text for run, (_, text) in found.items()}


def _within(folder: str, home: str) -> bool:
    folder, home = os.path.abspath(folder), os.path.abspath(home)
    return folder == home or folder.startswith(home.rstrip(os.sep) + os.sep)


def _relative(folder: str, log_dir: str) -> str:
    return os.path.relpath(folder, log_dir).replace(os.sep, "/")


def _run_name(folder: str, log_dir: str) -> str:
    parts = [] if _relative(folder, log_dir) == "." else _relative(folder, log_dir).split("/")
    if parts and parts[-1] == MONITOR_RUN_NAME:
        parts = parts[:-1]
    return "/".join(parts) or os.path.basename(os.path.abspath(_home(folder)))


def _rows(runs: tuple[Run, ...]) -> tuple[Row, ...]:
    rows = []
    for quantity in QUANTITIES:
        tags = sorted(
            {tag for run in runs for tag in run.scalars if quantity.source_of(tag) is not None},
            key=_natural,
        )
        for tag in tags:
            medians = tuple(run.median(tag) for run in runs)
            baseline = medians[0]
            ratios = tuple(
                None
                if not quantity.compared_by_ratio or baseline in (None, 0) or median is None
                else median / baseline
                for median in medians
            )
            rows.append(Row(quantity, quantity.source_of(tag) or "", tag, medians, ratios))
    return tuple(rows)


def _natural(tag: str) -> list[object]:
    """Sort key putting gpu2 before gpu10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", tag)]
