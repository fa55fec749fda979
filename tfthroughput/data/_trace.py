"""Host events of a TensorFlow profiler trace (``*.xplane.pb``), with their nesting.

The profiler writes an ``XSpace`` protobuf; its ``/host:CPU`` plane has one line per thread and,
on each line, events with a start offset, a duration and typed stats. tf.data records one event
per ``GetNext`` of each iterator (``Iterator::Root::Prefetch::Map``, with the iterator's ``id``,
its ``parent_id`` and its current parameters as stats), one per element produced by a
background thread (``PrefetchProduce``, ``ParallelMapProduce``, ...) and the function runs
(``FunctionRun`` with an ``id`` that the ``ExecutorState::Process`` events executing it share).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

from tensorflow.tsl.profiler.protobuf import xplane_pb2

HOST_PLANE = "/host:CPU"


@dataclass(eq=False)
class HostEvent:
    """One event on one thread; ``parent`` is the innermost event enclosing it there."""

    name: str
    display_name: str
    line: int
    start_ps: int
    duration_ps: int
    stats: dict[str, object]
    parent: HostEvent | None = None
    children: list[HostEvent] = field(default_factory=list)

    @property
    def end_ps(self) -> int:
        return self.start_ps + self.duration_ps

    @property
    def seconds(self) -> float:
        return self.duration_ps / 1e12

    def enclosing(self, prefix: str) -> HostEvent | None:
        """The nearest enclosing event whose name starts with ``prefix``."""
        event = self.parent
        while event is not None and not event.name.startswith(prefix):
            event = event.parent
        return event

    def contains(self, other: HostEvent) -> bool:
        return (
            self.line == other.line
            and self.start_ps <= other.start_ps
            and other.end_ps <= self.end_ps
        )


def newest_xspace(logdir: str) -> str:
    """Path of the newest ``*.xplane.pb`` the profiler wrote under ``logdir``."""
    paths = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    if not paths:
        raise RuntimeError(
            f"The TensorFlow profiler wrote no trace under {logdir!r}, so nothing can be read."
        )
    return max(paths, key=os.path.getmtime)


def read_host_events(path: str) -> list[HostEvent]:
    """Every event of the host plane in the trace at ``path``, nested per thread."""
    with open(path, "rb") as file:
        space = xplane_pb2.XSpace.FromString(file.read())
    plane = next((p for p in space.planes if p.name == HOST_PLANE), None)
    if plane is None:
        return []
    events: list[HostEvent] = []
    for line_number, line in enumerate(plane.lines):
        stack: list[HostEvent] = []
        for raw in sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps)):
            metadata = plane.event_metadata[raw.metadata_id]
            event = HostEvent(
                name=metadata.name,
                display_name=metadata.display_name or metadata.name,
                line=line_number,
                start_ps=line.timestamp_ns * 1000 + raw.offset_ps,
                duration_ps=raw.duration_ps,
                stats=_stats(plane, [*metadata.stats, *raw.stats]),
            )
            while stack and stack[-1].end_ps <= event.start_ps:
                stack.pop()
            if stack:
                event.parent = stack[-1]
                stack[-1].children.append(event)
            stack.append(event)
            events.append(event)
    return events


def _stats(plane: xplane_pb2.XPlane, stats) -> dict[str, object]:
    values: dict[str, object] = {}
    for stat in stats:
        kind = stat.WhichOneof("value")
        if kind is None:
            continue
        value = getattr(stat, kind)
        if kind == "ref_value":
            value = plane.stat_metadata[value].name
        elif kind == "bytes_value":
            continue
        values[plane.stat_metadata[stat.metadata_id].name] = value
    return values
