"""A disk whose faults a test switches on and off: the file-opening seams of ``EventWriter``
(``create_file``, ``append_file``) and of ``GPUMonitor`` (``_create_event_file``,
``_append_event_file``), over real files in ``tmp_path``."""

from __future__ import annotations

import errno
import os
import threading

from tfthroughput.monitor.event_files import open_for_appending


class FaultyDisk:
    """Creates real files whose writes fail or hang while the test says so.

    Attributes:
        write_error: Raised by every write while set (e.g. ``ENOSPC``: a full disk).
        create_error: Raised when a new file is created while set (a read-only folder).
        hang: While set, a write waits (a hung network file system) until ``release`` is set,
            30 s at most.
        blocked: Set once a write is waiting.
        timed_out: Whether a write gave up waiting.
        created: Paths of the files created.
    """

    def __init__(self) -> None:
        self.write_error: OSError | None = None
        self.tear = False  # a failing write first writes half its bytes, as a full disk can
        self.create_error: OSError | None = None
        self.hang = False
        self.release = threading.Event()
        self.blocked = threading.Event()
        self.timed_out = False  # a hung write gave up waiting for `release` (after 30 s)
        self.created: list[str] = []

    def create(self, path: str) -> _FaultyFile:
        if self.create_error is not None:
            raise self.create_error
        file = _FaultyFile(open(path, "xb"), self)  # noqa: SIM115 - closed by the writer
        self.created.append(path)
        return file

    def append(self, path: str) -> _FaultyFile:
        if self.create_error is not None:
            raise self.create_error
        return _FaultyFile(open_for_appending(path), self)

    def fill(self, *, tear: bool = False) -> None:
        self.write_error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.tear = tear

    def make_read_only(self) -> None:
        self.write_error = OSError(errno.EROFS, os.strerror(errno.EROFS))
        self.create_error = self.write_error


class _FaultyFile:
    def __init__(self, file, disk: FaultyDisk) -> None:
        self._file = file
        self._disk = disk

    def write(self, data: bytes) -> int:
        if self._disk.hang:
            self._disk.blocked.set()
            if not self._disk.release.wait(30):
                self._disk.timed_out = True
        if self._disk.write_error is not None:
            if self._disk.tear:
                self._file.write(data[: len(data) // 2])
                self._file.flush()
            raise self._disk.write_error
        return self._file.write(data)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
