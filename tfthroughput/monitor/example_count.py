"""The examples a ``fit`` trains, counted batch by batch where Keras hands them to the training
step, so that each epoch's and each window's examples/s is exact: a short last batch counts
what it holds, for arrays, ``tf.data``, a ``PyDataset``, a generator, and a strategy's global
batch alike.

Keras 3 gives callbacks neither the data nor its batches, so the count goes where the batches
go, on the ``fit``'s epoch iterator (found on the calling thread's stack), without a device
sync per batch:

- TensorFlow backend: every input reaches the training step as a ``tf.data`` pipeline (Keras
  turns arrays, a ``PyDataset`` and generators into one), read by the step's own graph. A last
  stage is added to that pipeline, before the strategy splits each global batch between its
  replicas, that adds each batch's leading dimension to a counter kept in the input graph
  (:mod:`tfthroughput.monitor.graph_count`); the monitor reads the counter once per window.
- Other backends (JAX, PyTorch): the batches are Python objects the training loop takes from
  an iterator on the host; that iterator is wrapped, and each batch's shape read
  (:class:`ExampleTally`). No value is read, nothing waits for a device.

The input runs a little ahead of the steps (prefetching; hooks that Keras runs on a thread of
their own), so a count keeps the sizes of its last :data:`RECENT` batches: the examples through
any recent batch are the total less the batches counted since (:func:`examples_through`).
Which batch a window ends at comes from the monitor's own step count.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

from tfthroughput._validation import leading_dimension
from tfthroughput.monitor.fit_watch import fit_locals

# Batch sizes a count remembers: how far the input may run ahead of the steps it is read at.
RECENT = 256


class Snapshot(NamedTuple):
    """A count as read once: ``batches`` counted, ``examples`` in them, and the sizes of the
    last ones, ``recent[i % len(recent)]`` that of batch ``i``."""

    batches: int
    examples: int
    recent: tuple[int, ...]


def examples_through(snapshot: Snapshot | tuple, batches: int) -> int | None:
    """Examples in the first ``batches`` batches counted, or ``None`` when that batch is too
    far back to be told. Batches past the count had no examples: a count is read once the
    step it is read at has taken its batches, so a step past it is one Keras names without
    data (an execution cut short by the data's end, the extra step Keras takes on data of
    unknown length).

    Example:
        >>> examples_through(Snapshot(3, 36, (16, 16, 4, 0)), 2)
        32
        >>> examples_through(Snapshot(3, 36, (16, 16, 4, 0)), 4)
        36
    """
    counted, examples, recent = snapshot
    ahead = counted - batches
    if ahead < 0:
        return examples
    if ahead > len(recent):
        return None
    return examples - sum(recent[index % len(recent)] for index in range(batches, counted))


class ExampleCount(Protocol):
    """A count kept for one ``fit``: :class:`HostCount` or ``graph_count.GraphCount``."""

    def snapshot(self) -> Snapshot: ...

    def waited(self) -> float | None:
        """Seconds the loop has waited for its batches so far, ``None`` where not timed."""

    def detach(self) -> None: ...


class ExampleTally:
    """A count kept on the host, added to from any thread.

    Example:
        >>> tally = ExampleTally()
        >>> for size in (16, 16, 4):
        ...     tally.add(size)
        >>> examples_through(tally.snapshot(), 3), examples_through(tally.snapshot(), 2)
        (36, 32)
    """

    def __init__(self, recent: int = RECENT) -> None:
        self._lock = threading.Lock()
        self._batches = 0
        self._examples = 0
        self._recent = [0] * recent

    def add(self, size: int) -> None:
        with self._lock:
            self._recent[self._batches % len(self._recent)] = size
            self._batches += 1
            self._examples += size

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(self._batches, self._examples, tuple(self._recent))


class HostCount:
    """Counts the batches a ``fit``'s epoch iterator hands to the training loop on the host,
    by wrapping the method that makes each epoch's iterator (on the instance; put back by
    :meth:`detach`), and times how long the loop waits for each (the ``next`` of the
    iterator inside, on ``clock``: the loop's own thread asks for each batch right before the
    step that takes it)."""

    def __init__(self, epoch_iterator: object, clock: Callable[[], float] = time.monotonic):
        self.tally = ExampleTally()
        self._iterator = weakref.ref(epoch_iterator)
        self._waited = 0.0  # written by the loop's thread only; a float's read is atomic
        # The class's own method: a cached iterator (an epoch's validation) is counted anew
        # each time, never through an earlier count's wrapper.
        original = type(epoch_iterator)._get_iterator.__get__(epoch_iterator)
        add = self.tally.add

        def counted_iterator() -> Iterator:
            batches = iter(original())
            while True:
                asked = clock()
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                finally:
                    self._waited += clock() - asked
                size = leading_dimension(batch)
                if size is not None:
                    add(size)
                yield batch

        epoch_iterator._get_iterator = counted_iterator

    def snapshot(self) -> Snapshot:
        return self.tally.snapshot()

    def waited(self) -> float:
        return self._waited

    def detach(self) -> None:
        iterator = self._iterator()
        if iterator is not None:
            vars(iterator).pop("_get_iterator", None)  # the class's method shows through


def attach_to_fit(
    method: str = "fit", clock: Callable[[], float] = time.monotonic, timed: bool = True
) -> ExampleCount | None:
    """A count of the batches of the Keras ``fit`` (or ``method``: ``"evaluate"``, an epoch's
    validation too, or ``"predict"``) on the calling thread's stack, before the call's first
    iterator is made; ``None`` where none can be kept. ``clock`` times the waits on the host
    (under TensorFlow the input graph reads its own, unless ``timed`` is false)."""
    epoch_iterator = fit_locals("epoch_iterator", method=method).get("epoch_iterator")
    if epoch_iterator is None or getattr(epoch_iterator, "_current_iterator", None) is not None:
        return None
    try:
        if hasattr(epoch_iterator, "_distributed_dataset"):  # Keras's TensorFlow trainer
            if "tensorflow" not in sys.modules:
                return None
            from tfthroughput.monitor.graph_count import GraphCount

            return GraphCount.attach(epoch_iterator, RECENT, timed=timed)
        if callable(getattr(epoch_iterator, "_get_iterator", None)):
            return HostCount(epoch_iterator, clock)
    except Exception:  # noqa: BLE001 - an input that cannot be counted still trains
        return None
    return None


def settled_batches(hooked: int, snapshot: Callable[[], Snapshot] | None) -> int:
    """The batches of a validation or an ``evaluate``/``predict`` call, read at its end: those
    its batch hooks named, cut to the batches its count (``snapshot``, read from the call's
    start) saw. With ``steps_per_execution`` above 1, Keras's last hook names the end step of
    the last execution even where the data ran out inside it.

    Example:
        >>> settled_batches(9, lambda: Snapshot(7, 100, (16, 16, 4)))  # 3 executions of 3
        7
    """
    if snapshot is None or hooked <= 0:
        return hooked
    try:
        counted = snapshot()[0]
    except Exception:  # noqa: BLE001 - a count that cannot be read leaves the hooks' figure
        return hooked
    return counted if 0 < counted < hooked else hooked


def mean_through(snapshot: Callable[[], Snapshot] | None, batches: int | None) -> float | None:
    """Mean examples per batch of the first ``batches`` counted (all of a validation or of an
    ``evaluate`` call, read at its end), or ``None`` where that cannot be told."""
    if snapshot is None or not batches:
        return None
    try:
        examples = examples_through(snapshot(), batches)
    except Exception:  # noqa: BLE001 - a count that cannot be read leaves the figure out
        return None
    return None if not examples else examples / batches


class StepExamples:
    """The examples per step of each window and epoch of one ``fit``, read from its count at
    the steps where they end, else ``batch_size``. Not thread-safe: the run holds its lock.

    A window or epoch is told by the optimizer steps the monitor counts: within an epoch, batch
    ``step - first_step`` of it; across epochs, the batches the epochs before it trained.

    Args:
        snapshot: Reads the count once (``HostCount.snapshot``, ``GraphCount.snapshot``), or
            ``None`` where no count is kept.
        batch_size: Examples per step where the count cannot tell, if known.
    """

    def __init__(self, snapshot: Callable[[], Snapshot] | None, batch_size: int | None) -> None:
        self._snapshot = snapshot
        self.batch_size = batch_size
        self._before = 0  # batches the fit's earlier epochs trained
        self._first_step = 0
        self._mark: tuple[int, int | None] = (0, 0)  # (batch, examples through it)
        self._epoch_mark: tuple[int, int | None] = (0, 0)

    def settled(self, batches: int) -> int:
        """``batches`` named by a call's hooks, cut to those its count saw (
        :func:`settled_batches`)."""
        return settled_batches(batches, self._snapshot)

    def begin_epoch(self, first_step: int) -> None:
        self._first_step = first_step
        self._epoch_mark = self._mark = (self._before, _through(self._read(), self._before))

    def window(self, step: int, steps: int) -> float | None:
        """Mean examples per step of the window of ``steps`` steps that ended at ``step``: 0
        for a window of steps past the count, which had no batch."""
        snapshot = self._read()  # once: every figure of the window from the same count
        last = self._before + step - self._first_step
        first, end = _within(snapshot, last - steps), _within(snapshot, last)
        start = self._known(first, snapshot)
        self._mark = (end, _through(snapshot, end))
        if first == end < last and start is not None:
            return 0.0  # every step of it past the count
        return self._mean(start, self._mark[1], steps)

    def epoch(self, steps: int | None) -> float | None:
        """Mean examples per step of the epoch in progress, of ``steps`` steps; then on to the
        next epoch, from the batches it took."""
        if not steps:
            return self.batch_size
        snapshot = self._read()
        end = _within(snapshot, self._before + steps)
        start = self._epoch_mark[1] if self._epoch_mark[0] == self._before else None
        mean = self._mean(start, self._known(end, snapshot), steps)
        self._before = end
        return mean

    def _read(self) -> Snapshot | tuple | None:
        """The count now, or ``None`` where none is kept or it cannot be read."""
        try:
            return self._snapshot() if self._snapshot is not None else None
        except Exception:  # noqa: BLE001 - a count that cannot be read leaves the figures out
            return None

    def _known(self, batch: int, snapshot: Snapshot | tuple | None) -> int | None:
        position, examples = self._mark
        return examples if position == batch else _through(snapshot, batch)

    def _mean(self, start: int | None, end: int | None, steps: int) -> float | None:
        if start is None or end is None or steps <= 0 or end <= start:
            return self.batch_size
        return (end - start) / steps


def _within(snapshot: Snapshot | tuple | None, batch: int) -> int:
    """``batch`` held to the batches counted: steps past them had no batch (Keras names steps
    without data: :func:`examples_through`)."""
    counted = snapshot[0] if snapshot is not None else 0
    return min(batch, counted) if counted > 0 else batch


def _through(snapshot: Snapshot | tuple | None, batch: int) -> int | None:
    return examples_through(snapshot, batch) if snapshot is not None else None
