"""The monitor's event files: written on a thread of their own, never lost, faults told once.

File names, creation and appending: :mod:`tfthroughput.monitor.event_files`.

Hand-off: :meth:`EventWriter.write` puts the record in a bounded queue and returns; a daemon
thread writes and flushes it. A slow or hung file system therefore never holds up a training
step or an epoch's end: once the writer is :data:`QUEUE_LIMIT` records behind, new records are
dropped and counted.

Faults: a record that cannot be written (a full disk, a read-only or deleted folder, a hung
file system) is counted; the first fault of the writer's life (one ``fit``) is warned about
once, with its reason, by the next caller of :meth:`~EventWriter.write` or by
:meth:`~EventWriter.close`, and ``close`` says how many records were lost
(:mod:`tfthroughput.monitor.write_faults`). After a fault the
next record goes to a new file (with the Custom Scalars layout written again), so a file is
never appended to after a half-written record; a folder deleted mid-``fit`` is made again.
Nothing is raised to the training loop.

Records are written with TensorBoard's own pure-Python record writer (the framing its
``EventFileWriter`` and PyTorch's ``SummaryWriter`` use) on a plain file, so the monitor needs no
TensorFlow and works under every Keras backend. ``EventFileWriter`` itself is not used: it opens
files through ``tensorboard.compat.tf``, which imports TensorFlow whenever it is installed, even
under the JAX backend.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import BinaryIO

from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.monitor.dashboard import layout_summary
from tfthroughput.monitor.event_files import (
    create_event_file,
    create_new_file,
    hold,
    open_for_appending,
    release,
)
from tfthroughput.monitor.events import scalar_summary
from tfthroughput.monitor.write_faults import WriteFaults

# Records the writer may be behind before new ones are dropped: about 1000 epochs or windows,
# a few MB, so only a file system that stopped answering ever reaches it.
QUEUE_LIMIT = 1000
# How long `close` waits for the records still queued before it gives them up as lost.
CLOSE_TIMEOUT_SECONDS = 10.0

_STOP = object()


def _serialized(**fields) -> bytes:
    return event_pb2.Event(**fields).SerializeToString()


class EventWriter:
    """The event file of one run, written on a background thread.

    The file is created when the writer is made (``on_train_begin``), so a folder that cannot
    be written fails before the first epoch. :meth:`write` may be called from any thread.

    Args:
        run_dir: The run's folder, created if missing.
        log_dir: The ``log_dir`` argument, for the error message.
        create_file: Creates a new file for binary writing and fails if it exists. Defaults to
            :func:`~tfthroughput.monitor.event_files.create_new_file`; tests inject
            file-system faults here, and in ``append_file``.
        append_to: An event file of an earlier run to write on at its end (the call before,
            of the same kind); a new file where it is gone or another writer holds it.
        append_file: Opens ``append_to`` to write at its end. Defaults to
            :func:`~tfthroughput.monitor.event_files.open_for_appending`.
        close_timeout: Seconds :meth:`close` waits for queued records. Defaults to
            :data:`CLOSE_TIMEOUT_SECONDS`.
        wall_clock: Seconds since the epoch, for file names and event times. Defaults to
            ``time.time``.

    Raises:
        ValueError: If ``run_dir`` cannot be created or its event file cannot be written.

    Example:
        >>> writer = EventWriter(run_dir, log_dir)  # doctest: +SKIP
        >>> writer.write(0, {"epoch/seconds": 2.5})  # doctest: +SKIP
        >>> writer.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        run_dir: str,
        log_dir: str,
        *,
        create_file: Callable[[str], BinaryIO] = create_new_file,
        append_to: str | None = None,
        append_file: Callable[[str], BinaryIO] = open_for_appending,
        close_timeout: float = CLOSE_TIMEOUT_SECONDS,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        self.run_dir = run_dir
        # Looked up now, not when this module was imported: the wall clock in force when the
        # run starts names its files, as it names those of every other writer in the folder.
        self._wall_clock = time.time if wall_clock is None else wall_clock
        self._create_file = create_file
        self._close_timeout = close_timeout
        try:
            taken_up = append_to is not None and self._take_up(append_to, append_file)
            if not taken_up:
                self._records, self.path = self._new_file()
        except OSError as error:
            raise ValueError(
                f"`log_dir` is not writable ({error.strerror or error}); GPUMonitor needs to "
                f"create {run_dir!r}. Received: log_dir={log_dir!r}"
            ) from error
        self._layout: bytes | None = None  # the latest layout, written again into a new file
        self._lock = threading.Lock()  # guards the counts, the fault and the closed flag
        self._idle = threading.Condition(self._lock)  # notified when nothing is queued
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._queued = 0  # records handed off and not yet written or lost
        self._faults = WriteFaults(run_dir)
        self._closed = False
        self._abandoned = False  # close gave up waiting: the thread drops what is left
        self._thread = threading.Thread(
            target=self._run, name="tfthroughput-event-writer", daemon=True
        )
        self._thread.start()

    @property
    def lost(self) -> int:
        """Records that could not be written so far."""
        with self._lock:
            return self._faults.lost_records

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record handed off so far is written (or counted as lost).

        Args:
            timeout: Seconds to wait at most; None waits as long as it takes.

        Returns:
            Whether the writer caught up within ``timeout``.
        """
        with self._idle:
            return self._idle.wait_for(lambda: self._queued == 0, timeout)

    def write(self, step: int, scalars: Mapping[str, float], *, what: str = "epoch") -> None:
        """Hand every scalar at ``step`` to the writer thread as one event.

        ``what`` names the step in a warning: ``"epoch"`` or ``"the window at step"``.
        """
        self._hand_off(("scalars", self._wall_clock(), step, dict(scalars)), f"{what} {step}")

    def write_summary(self, step: int, summary, what: str) -> None:
        """Hand one ``Summary`` (a Text-tab entry, say) at ``step`` to the writer thread."""
        record = _serialized(wall_time=self._wall_clock(), step=step, summary=summary)
        self._hand_off(("record", record), what)

    def write_layout(self, layout) -> None:
        """Write the Custom Scalars layout (TensorBoard shows the latest one written)."""
        record = _serialized(wall_time=self._wall_clock(), step=0, summary=layout_summary(layout))
        self._hand_off(("layout", record), "the Custom Scalars layout")

    def close(self) -> None:
        """Write what is queued (waiting at most ``close_timeout``), close the file, and warn
        once with the count if anything was lost. Later writes are ignored."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(_STOP)
        self._thread.join(self._close_timeout)
        with self._lock:
            if self._thread.is_alive():  # a hung file system: give up what is still queued
                self._abandoned = True
                self._faults.lost(
                    self._queued,
                    f"the file system did not finish writing within {self._close_timeout:g} s",
                )
                self._queued = 0
                self._idle.notify_all()
            message = self._faults.due_message(at_close=True)
        if message is not None:
            warnings.warn(message, MonitoringWarning, stacklevel=2)

    # Internals -----------------------------------------------------------------------------

    def _hand_off(self, item: tuple, what: str) -> None:
        with self._lock:
            if self._closed:
                return
            self._faults.handed_off()
            if self._queued >= QUEUE_LIMIT:
                self._faults.lost(1, f"the writer fell {QUEUE_LIMIT} records behind", what)
            else:
                self._queued += 1
                self._queue.put((item, what))
            message = self._faults.due_message(at_close=False)
        if message is not None:
            warnings.warn(message, MonitoringWarning, stacklevel=3)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                break
            self._write_item(*item)
        self._drop_file()

    def _write_item(self, item: tuple, what: str) -> None:
        if self._abandoned:
            return  # counted as lost by close
        if item[0] == "layout":
            record = self._layout = item[1]
        elif item[0] == "record":
            record = item[1]
        else:
            _, wall_time, step, scalars = item
            record = _serialized(wall_time=wall_time, step=step, summary=scalar_summary(scalars))
        try:
            writer = self._open_writer(record)
            writer.write(record)
            writer.flush()
            self._complete_bytes += _framed_size(record)
        except Exception as error:  # noqa: BLE001 - a writer fault must not stop training
            self._drop_file(torn=True)  # the next record starts a new file
            with self._lock:
                self._faults.lost(1, _reason(error), what)
                self._done()
            return
        with self._lock:
            self._done()

    def _done(self) -> None:
        """One queued record written or lost. Holds the lock."""
        if self._abandoned:
            return  # close counted it already
        self._queued -= 1
        if self._queued == 0:
            self._idle.notify_all()

    def _open_writer(self, record: bytes) -> RecordWriter:
        """The writer of the current file; a new file when the last one failed or is gone."""
        if self._records is not None and not os.path.exists(self.path):
            # Deleted, or its folder deleted: what it held is gone; what comes next is kept.
            self._drop_file()
            with self._lock:
                self._faults.lost(0, "its event file was deleted; writing on in a new file")
        if self._records is None:
            self._records, self.path = self._new_file()
            if self._layout is not None and record is not self._layout:
                self._records.write(self._layout)
                self._records.flush()
                self._complete_bytes += _framed_size(self._layout)
        return self._records

    def _take_up(self, path: str, append_file: Callable[[str], BinaryIO]) -> bool:
        """Write on at the end of ``path``, if it exists and no other writer holds it."""
        if not hold(path):
            return False
        try:
            file = append_file(path)
            self._complete_bytes = os.path.getsize(path)
        except OSError:
            release(path)  # gone, or no longer writable: a new file says why, if it cannot
            return False
        self._records, self.path = RecordWriter(file), path
        return True

    def _new_file(self) -> tuple[RecordWriter, str]:
        """Create the next event file, with its version record written and flushed."""
        os.makedirs(self.run_dir, exist_ok=True)
        file, path = create_event_file(self.run_dir, self._wall_clock(), self._create_file)
        hold(path)
        writer = RecordWriter(file)
        header = _serialized(wall_time=self._wall_clock(), file_version="brain.Event:2")
        try:
            writer.write(header)
            writer.flush()
        except BaseException:
            _close_quietly(writer)
            _remove_quietly(path)  # no empty files left behind on a full disk
            release(path)
            raise
        self._complete_bytes = _framed_size(header)
        return writer, path

    def _drop_file(self, *, torn: bool = False) -> None:
        """Close the current file; after a failed write (``torn``), cut it back to its last
        complete record, so that every reader (TensorFlow's too) reads it to the end."""
        file, self._records = self._records, None
        if file is None:
            return
        _close_quietly(file)  # a failed record is counted already
        if torn:
            try:
                os.truncate(self.path, self._complete_bytes)  # frees space: works on a full disk
            except OSError:
                pass  # deleted meanwhile, or the file system is gone: nothing left to mend
        release(self.path)


def _framed_size(record: bytes) -> int:
    """Bytes a record takes in the file: length (8), its CRC (4), the data, the data's CRC (4)."""
    return len(record) + 16


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"{type(error).__name__}: {error.strerror}"
    return repr(error)


def _close_quietly(writer: RecordWriter) -> None:
    try:
        writer.close()
    except Exception:  # noqa: BLE001, S110 - the file is being given up already
        pass


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
