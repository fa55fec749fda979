"""What AUTOTUNE chose: run a pipeline under the TensorFlow profiler and read its tf.data events.

tf.data records, for every ``GetNext`` of every iterator while the profiler runs, the values its
autotuning model has set at that moment (``parallelism`` of maps, batches and interleaves,
``buffer_limit`` of prefetches, ``max_batch_results`` of a fused map-and-batch), and the events
of the background threads that fill each asynchronous stage's buffer. This is the trace that
xprof's tf.data bottleneck analysis reads; this module reads it directly (TensorFlow's own
``xplane_pb2``, no TensorBoard needed).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass

import tensorflow as tf

from tfthroughput._validation import check_dataset, check_positive_int
from tfthroughput.data._graph import DatasetGraph
from tfthroughput.data._trace import (
    ASYNC_ITERATOR,
    HostEvent,
    IteratorTimes,
    iterator_kind,
    newest_xspace,
    read_host_events,
)

# Values the autotuning model changes while the pipeline runs.
TUNED = ("parallelism", "buffer_limit", "max_batch_results")
# Values fixed when the dataset (or its iterator) was made, shown for context.
FIXED = ("cycle_length", "batch_size", "buffer_size", "deterministic")


@dataclass(frozen=True)
class StageMeasurement:
    """One iterator of the running pipeline, as the profiler saw it.

    Attributes:
        iterator: tf.data's iterator kind, e.g. ``"ParallelMapV2"``, ``"MapAndBatch"``.
        path: Its place in the iterator tree, e.g. ``"Root::Prefetch::ParallelMapV2"``
            (inner pipelines of an ``interleave`` are merged across cycle elements).
        datasets: The dataset names the iterator runs, e.g. ``("ParallelMapDatasetV2:4",)``
            or, fused by tf.data, ``("ParallelMapDatasetV2:4", "BatchDatasetV2:5")``.
        positions: The matching stage positions of the pipeline as written (as in
            :func:`tfthroughput.lint_pipeline`), empty for an iterator tf.data added (an
            injected prefetch) or one of an inner pipeline. In
            :func:`tfthroughput.describe_pipeline` they follow its numbering, with ``0`` for
            the source the builder was given.
        tuned: ``(name, value)`` of the autotuned values at the last call: what AUTOTUNE
            settled on.
        tuned_range: ``(name, lowest, highest)`` of the same values over the run.
        fixed: ``(name, value)`` of values fixed at build time (cycle length, batch size,
            shuffle buffer, deterministic), as text.
        calls: ``GetNext`` calls.
        busy_seconds: Thread time spent on this stage's own work, on every thread: its
            ``GetNext`` calls minus the calls into its inputs, its producer threads' work,
            and the runs of its function on tf.data's thread pool.
        wait_seconds: For an asynchronous stage, the time its consumer waited on its buffer.
        share: ``busy_seconds`` over the sum of every stage's ``busy_seconds``.
    """

    iterator: str
    path: str
    datasets: tuple[str, ...]
    positions: tuple[int, ...]
    tuned: tuple[tuple[str, int], ...]
    tuned_range: tuple[tuple[str, int, int], ...]
    fixed: tuple[tuple[str, str], ...]
    calls: int
    busy_seconds: float
    wait_seconds: float
    share: float

    def __str__(self) -> str:
        chose = ", ".join(f"{k}={v}" for k, v in self.tuned) or "-"
        where = f"stage {'+'.join(map(str, self.positions))}" if self.positions else "added"
        return (
            f"{self.iterator} ({where}): {chose}; busy {self.busy_seconds:.3f} s ({self.share:.0%})"
        )


@dataclass(frozen=True)
class PipelineMeasurement:
    """What :func:`measure_pipeline` read from the profiler's trace.

    Attributes:
        num_batches: Elements taken from the dataset (batches, for a batched dataset).
        seconds: Wall time of taking them, profiler on.
        stages: One :class:`StageMeasurement` per iterator, source first.
        runtime: tf.data's resource settings for this iterator, from its root:
            ``cpu_budget`` (cores the autotuner may use), ``ram_budget_megabytes``,
            ``threadpool_size``, ``algorithm``.
    """

    num_batches: int
    seconds: float
    stages: tuple[StageMeasurement, ...]
    runtime: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        header = ("iterator", "stage", "AUTOTUNE chose", "fixed", "busy s", "share", "waited s")
        rows = [header]
        for s in self.stages:
            rows.append(
                (
                    s.iterator,
                    _where(s, self.stages),
                    ", ".join(f"{k}={v}" for k, v in s.tuned) or "-",
                    ", ".join(f"{k}={v}" for k, v in s.fixed) or "-",
                    f"{s.busy_seconds:.3f}",
                    f"{s.share:.0%}",
                    f"{s.wait_seconds:.3f}" if ASYNC_ITERATOR.match(s.iterator) else "-",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        settings = ", ".join(f"{k}={v}" for k, v in self.runtime)
        lines = [
            f"measured {self.num_batches} batches in {self.seconds:.2f} s (profiler on)"
            + (f"; tf.data: {settings}" if settings else "")
        ]
        for row in rows:
            cells = [
                c.ljust(w) if i < 4 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)


def measure_pipeline(
    dataset: tf.data.Dataset, num_batches: int = 50, *, log_dir: str | None = None
) -> PipelineMeasurement:
    """Run a pipeline for ``num_batches`` elements under the profiler; report what AUTOTUNE chose.

    A fresh iterator takes ``num_batches`` elements (fewer if the dataset ends) while the
    TensorFlow profiler records host events; the trace is then read back. Per iterator the
    result gives the values the autotuner set at the last call (and their range over the run),
    the values fixed when the dataset was made, and each stage's share of the work.

    What the trace cannot say: the CPU time of a function is only attributed where tf.data
    links it to a stage (a parallel map's or interleave's runs, through the producer event
    that launched them); work inside a synchronous stage's ``GetNext`` is counted as that
    stage's. Times include the profiler's own overhead (a few microseconds per event), and on
    a shared machine they move from run to run; the tuned values are what tf.data chose on
    this machine, for this load.

    Args:
        dataset: Any ``tf.data.Dataset``.
        num_batches: Elements to take. Defaults to ``50``.
        log_dir: Keep the trace there (TensorBoard's Profile tab shows it). Defaults to
            ``None``: a temporary folder, removed afterwards.

    Returns:
        A frozen :class:`PipelineMeasurement`.

    Raises:
        TypeError: If ``dataset`` is not a ``tf.data.Dataset`` or ``num_batches`` not an int.
        ValueError: If ``num_batches`` is not positive.
        RuntimeError: If another profiler session is running (e.g. a Keras ``TensorBoard``
            callback with ``profile_batch``), or the profiler wrote no trace.

    Example:
        >>> import tensorflow as tf
        >>> from tfthroughput.data import measure_pipeline
        >>> measurement = measure_pipeline(tf.data.Dataset.range(100).batch(10), 5)
        >>> measurement.num_batches, [stage.iterator for stage in measurement.stages]
        (5, ['Range', 'BatchV2', 'Prefetch'])
    """
    check_dataset("dataset", dataset)
    check_positive_int("num_batches", num_batches)
    folder = log_dir if log_dir is not None else tempfile.mkdtemp(prefix="tfthroughput_autotune_")
    try:
        trace, taken, seconds = _profiled_run(dataset, num_batches, folder)
        positions = DatasetGraph(dataset).positions_by_name()
        return measurement_from_trace(trace, positions, taken, seconds)
    finally:
        if log_dir is None:
            shutil.rmtree(folder, ignore_errors=True)


def measurement_from_trace(
    trace_path: str, positions: Mapping[str, int], num_batches: int, seconds: float
) -> PipelineMeasurement:
    """Read what AUTOTUNE chose from a profiler trace already recorded.

    :func:`measure_pipeline` records the trace and calls this; a trace kept with its
    ``log_dir`` (or recorded once and stored) can be read again, with the same result.

    Args:
        trace_path: The ``*.xplane.pb`` file the profiler wrote.
        positions: The stage position of each dataset name of the pipeline the trace ran,
            e.g. ``{"RangeDataset:0": 1, "MapDataset:1": 2}``; the names number every dataset
            the process made, so they are read when the trace is recorded.
        num_batches: Elements taken while the profiler ran.
        seconds: Wall time of taking them.

    Returns:
        A frozen :class:`PipelineMeasurement`.
    """
    return _measurement(read_host_events(trace_path), num_batches, seconds, dict(positions))


def _profiled_run(
    dataset: tf.data.Dataset, num_batches: int, folder: str
) -> tuple[str, int, float]:
    """Draw up to ``num_batches`` batches under the profiler (host events only, writing to
    ``folder``). Returns the trace's path, the batches drawn and the seconds they took."""
    options = tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=2, python_tracer_level=0, device_tracer_level=0
    )
    try:
        tf.profiler.experimental.start(folder, options=options)
    except tf.errors.AlreadyExistsError as error:
        raise RuntimeError(
            "Another TensorFlow profiler session is running (for example a Keras "
            "TensorBoard callback with profile_batch); measure the pipeline outside it."
        ) from error
    taken, start = 0, time.perf_counter()
    try:
        iterator = iter(dataset)
        for _ in range(num_batches):
            try:
                next(iterator)
            except StopIteration:
                break
            taken += 1
        seconds = time.perf_counter() - start
    finally:
        tf.profiler.experimental.stop()
    del iterator
    return newest_xspace(folder), taken, seconds


def _measurement(
    events: list[HostEvent], batches: int, seconds: float, positions: dict[str, int]
) -> PipelineMeasurement:
    times = IteratorTimes.of(events)
    total = sum(times.busy[p] for p in times.events if p != "Root") or 1.0
    stages = [
        _stage(path, own, times.busy[path], times.wait[path], times.busy[path] / total, positions)
        for path, own in times.events.items()
        if path != "Root"
    ]
    root = times.events.get("Root", [])
    runtime = tuple(
        (key, str(root[-1].stats[key]))
        for key in ("cpu_budget", "ram_budget_megabytes", "threadpool_size", "algorithm")
        if root and key in root[-1].stats
    )
    return PipelineMeasurement(batches, seconds, tuple(_in_pipeline_order(stages)), runtime)


def _in_pipeline_order(stages: list[StageMeasurement]) -> list[StageMeasurement]:
    """Stages of the pipeline as written by position; an inner pipeline's (an interleave's
    function, whose iterator paths run through the interleave's) just before its interleave."""
    placed = {s.path: min(s.positions) for s in stages if s.positions}

    def key(stage: StageMeasurement) -> tuple[float, int, int]:
        if stage.path in placed:
            return (placed[stage.path], 1, 0)
        outer = [p for p in placed if stage.path.startswith(p + "::")]
        if outer:
            return (placed[max(outer, key=len)], 0, -stage.path.count("::"))
        return (float("inf"), 0, -stage.path.count("::"))  # added by tf.data: at the end

    return sorted(stages, key=key)


def _where(stage: StageMeasurement, stages: tuple[StageMeasurement, ...]) -> str:
    def text(positions: tuple[int, ...]) -> str:
        return "source" if positions == (0,) else "+".join(map(str, positions))

    if stage.positions:
        return text(stage.positions)
    outer = [s for s in stages if s.positions and stage.path.startswith(s.path + "::")]
    if outer:
        return f"in {text(max(outer, key=lambda s: len(s.path)).positions)}"
    return "added by tf.data" if any(d.startswith("inject/") for d in stage.datasets) else "-"


def _stage(
    path: str,
    own: list[HostEvent],
    busy: float,
    wait: float,
    share: float,
    positions: dict[str, int],
) -> StageMeasurement:
    own = sorted(own, key=lambda e: e.start_ps)
    last = own[-1].stats
    name = str(last.get("name", ""))
    datasets = tuple(re.findall(r"[A-Za-z0-9]+Dataset[A-Za-z0-9]*:\d+|inject/prefetch\S*", name))
    tuned, ranges = [], []
    for key in TUNED:
        values = [int(e.stats[key]) for e in own if isinstance(e.stats.get(key), int)]
        if values:
            tuned.append((key, values[-1]))
            ranges.append((key, min(values), max(values)))
    fixed = tuple((key, str(last[key])) for key in FIXED if key in last)
    found = tuple(sorted(positions[d] for d in datasets if d in positions))
    return StageMeasurement(
        iterator=iterator_kind(own[-1]),
        path=path,
        datasets=datasets,
        positions=found,
        tuned=tuple(tuned),
        tuned_range=tuple(ranges),
        fixed=fixed,
        calls=len(own),
        busy_seconds=busy,
        wait_seconds=wait,
        share=share,
    )
