"""Starting a :class:`~tfthroughput.monitor.live_run.LiveRun`: its writer, sources and sampler.

One way for every phase the monitor measures on its own: a ``fit`` (with its cluster exchange
under MultiWorkerMirroredStrategy), and each ``evaluate`` or ``predict`` call outside ``fit``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from tfthroughput.hardware.sampler import Sampler
from tfthroughput.hardware.source import Source
from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.cluster_exchange import ClusterExchange
from tfthroughput.monitor.epoch_windows import UpdateFrequency
from tfthroughput.monitor.event_writer import EventWriter
from tfthroughput.monitor.example_count import Snapshot
from tfthroughput.monitor.fit_watch import FitCall
from tfthroughput.monitor.input_activity import InputActivitySource
from tfthroughput.monitor.live_run import LiveRun
from tfthroughput.monitor.strategy import Placement
from tfthroughput.monitor.tensorboard_sink import TensorBoardSink
from tfthroughput.sinks.fan_out import SinkFanOut
from tfthroughput.sinks.sink import RunInfo, Sink


@dataclass(frozen=True)
class RunSettings:
    """The monitor's settings a run needs.

    Attributes:
        log_dir: The ``log_dir`` argument, for error messages.
        interval: Seconds between samples.
        update: When windows end.
        statistics: The statistics to log.
        clock: Monotonic seconds.
        select: Keeps the statistics of the metrics the monitor was asked for.
        sources: Makes the sources to sample, once per run.
        create_file: Creates each event file (the monitor's seam for file-system faults).
        append_file: Opens an event file to append to (the same seam).
    """

    log_dir: str
    interval: float
    update: UpdateFrequency
    statistics: tuple[str, ...]
    clock: Callable[[], float]
    select: Callable[[WindowStats], WindowStats]
    sources: Callable[[], Iterable[Source]]
    create_file: Callable[[str], BinaryIO]
    append_file: Callable[[str], BinaryIO]


def start_run(
    settings: RunSettings,
    run_dir: str,
    call: FitCall | None,
    *,
    batch_size: int | None,
    count: Callable[[], Snapshot] | None = None,
    waited: Callable[[], float | None] | None = None,
    on_abandoned: Callable[[LiveRun], None],
    on_sample: Callable[[LiveRun], None],
    placement: Placement | None = None,
    phase: str | None = None,
    sinks: Sequence[Sink] = (),
    append_to: str | None = None,
) -> LiveRun:
    """A run writing into ``run_dir``, its sampler made but not started.

    Args:
        settings: The monitor's settings.
        run_dir: The run's folder.
        call: The Keras call that drives it, watched by the sampler thread: when the call is
            left without its end hook, ``on_abandoned(run)`` is called on that thread.
        batch_size: Examples per step, if known.
        count: Reads the count of the examples the call trains (or evaluates, predicts on),
            if one is kept (:mod:`tfthroughput.monitor.example_count`): exact where
            ``batch_size`` is not.
        waited: Reads the seconds the call's loop has waited for its batches so far, where
            that is measured (:mod:`tfthroughput.monitor.input_wait`).
        on_abandoned: See ``call``.
        on_sample: With time-based windows, called as ``on_sample(run)`` on the sampler
            thread after each sample (the monitor's hook, which ends a window when due).
        placement: Under a ``tf.distribute`` strategy, where this process runs; a
            multi-worker run gets the cluster exchange.
        phase: ``None`` for a ``fit``; ``"evaluate"`` or ``"predict"`` for such a call.
        sinks: The user's sinks, opened for this run after its TensorBoard writer (a ``fit``'s;
            an ``evaluate`` or ``predict`` call outside ``fit`` writes to TensorBoard only).
        append_to: The event file to write on at its end, if it can
            (:mod:`tfthroughput.monitor.event_files`); else a new one.

    Raises:
        ValueError: If ``run_dir`` cannot be written.
    """
    writer = EventWriter(
        run_dir,
        settings.log_dir,
        create_file=settings.create_file,
        append_to=append_to,
        append_file=settings.append_file,
    )
    fan_out = SinkFanOut([TensorBoardSink(writer), *sinks])
    run = LiveRun(
        writer,
        fan_out,
        update=settings.update,
        statistics=settings.statistics,
        batch_size=batch_size,
        count=count,
        waited=waited,
        clock=settings.clock,
        select=settings.select,
        phase=phase,
    )
    try:
        fan_out.open(_run_info(settings, run_dir, placement, batch_size))
        extra: list[Source] = []
        if placement is not None and placement.multi_worker:
            # The cluster exchange, and whether input runs Python.
            extra.append(InputActivitySource())
            run.cluster = ClusterExchange(placement, settings.log_dir)
        run.sampler = _sampler(settings, run, extra, call, on_abandoned, on_sample)
    except BaseException:
        fan_out.close()  # the event writer with them
        if run.cluster is not None:
            run.cluster.close()
        raise
    return run


def _run_info(
    settings: RunSettings, run_dir: str, placement: Placement | None, batch_size: int | None
) -> RunInfo:
    """What the sinks are opened with."""
    return RunInfo(
        run_dir,
        settings.log_dir,
        task=None if placement is None else placement.worker_name,
        is_chief=True if placement is None else placement.is_chief,
        batch_size=batch_size,
        statistics=tuple(settings.statistics),
    )


def _sampler(
    settings: RunSettings,
    run: LiveRun,
    extra: Sequence[Source],
    call: FitCall | None,
    on_abandoned: Callable[[LiveRun], None],
    on_sample: Callable[[LiveRun], None],
) -> Sampler:
    """The run's sampler (not started): the monitor's sources and ``extra``, watching ``call``."""
    return Sampler(
        [*settings.sources(), *extra],
        settings.interval,
        keep_running=None if call is None else call.is_running,
        on_abandoned=functools.partial(on_abandoned, run),
        on_sample=(
            functools.partial(on_sample, run) if settings.update.seconds is not None else None
        ),
    )
