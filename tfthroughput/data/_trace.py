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
import re
from collections import defaultdict
from dataclasses import dataclass, field

from tensorflow.tsl.profiler.protobuf import xplane_pb2

HOST_PLANE = "/host:CPU"
# Iterators whose GetNext hands out elements that background threads produced.
ASYNC_ITERATOR = re.compile(r"^(Prefetch|ParallelMap|MapAndBatch|ParallelInterleave|ParallelBatch)")


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


@dataclass
class IteratorTimes:
    """Each iterator's events and thread time, grouped by its path in the iterator tree.

    ``busy``: own work on every thread (``GetNext`` minus the calls into its inputs for a
    synchronous iterator; its producer events minus their input calls, plus the function runs
    they launched on tf.data's thread pool, for an asynchronous one). ``wait``: for an
    asynchronous iterator, the time its consumer spent in its ``GetNext`` (waiting on its
    buffer).
    """

    events: dict[str, list[HostEvent]]
    busy: dict[str, float]
    wait: dict[str, float]

    @classmethod
    def of(cls, events: list[HostEvent]) -> IteratorTimes:
        iterators = [e for e in events if e.name.startswith("Iterator::") and "id" in e.stats]
        path_of = {e.stats["id"]: _path(e.name) for e in iterators}
        by_path: dict[str, list[HostEvent]] = defaultdict(list)
        for event in iterators:
            by_path[path_of[event.stats["id"]]].append(event)
        busy: dict[str, float] = defaultdict(float)
        wait: dict[str, float] = defaultdict(float)
        for path, own in by_path.items():
            for event in own:
                self_seconds = event.seconds - sum(c.seconds for c in _nested_iterators(event))
                if ASYNC_ITERATOR.match(iterator_kind(event)):
                    wait[path] += self_seconds
                else:
                    busy[path] += self_seconds
        runs = _function_runs(events)
        for event in events:
            if not event.name.endswith("Produce") or event.enclosing("Iterator::") is not None:
                continue
            owner = _producer_owner(event, path_of)
            if owner is None:
                continue
            busy[owner] += event.seconds - sum(c.seconds for c in _nested_iterators(event))
            for launch in _walk(event):
                if launch.name == "FunctionRun" and launch.enclosing("Iterator::") is None:
                    busy[owner] += sum(
                        run.seconds
                        for run in runs.get(launch.stats.get("id"), ())
                        if not launch.contains(run)
                    )
        return cls(dict(by_path), busy, wait)


def _path(name: str) -> str:
    return re.sub(r"\[\d+\]", "", name.removeprefix("Iterator::"))


def iterator_kind(event: HostEvent) -> str:
    return event.display_name.removeprefix("Iterator::").split("::")[-1]


def _walk(event: HostEvent):
    for child in event.children:
        yield child
        yield from _walk(child)


def _nested_iterators(event: HostEvent) -> list[HostEvent]:
    """The iterator calls made directly inside ``event`` (not inside a nested call)."""
    own = event if event.name.startswith("Iterator::") else None
    return [
        c
        for c in _walk(event)
        if c.name.startswith("Iterator::") and c.enclosing("Iterator::") is own
    ]


def _producer_owner(event: HostEvent, path_of: dict[object, str]) -> str | None:
    """The stage a producer event works for: the parent of the input call it makes."""
    for child in _walk(event):
        if child.name.startswith("Iterator::"):
            return path_of.get(child.stats.get("parent_id"))
    return None


def _function_runs(events: list[HostEvent]) -> dict[object, list[HostEvent]]:
    runs: dict[object, list[HostEvent]] = defaultdict(list)
    for event in events:
        if event.name == "ExecutorState::Process" and "id" in event.stats:
            runs[event.stats["id"]].append(event)
    return runs
