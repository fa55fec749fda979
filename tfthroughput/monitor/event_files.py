"""The monitor's event files: their names, creating one, and taking one up again to append to.

Names: TensorFlow's writer names a file ``events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2``
with its own counter ``<n>``; a file of ours named the same way would take the same name as one
TensorFlow creates in the same folder within the same second (a diagnosis written beside the
run), and one would replace the other. Ours end in ``.<pid>.tfthroughput-<n>.v2``, a name no
TensorFlow writer makes, and are created exclusively: an existing file is never truncated, the
next number is taken instead (two monitors in one folder, another process with the same pid).

Appending: each ``evaluate`` or ``predict`` call outside ``fit`` is a run of its own, and the
calls of one kind continue the file of the call before them, so a loop of a thousand calls
leaves one file for TensorBoard to read, not a thousand. A file is taken up only while no
other writer of this process holds it (two copies of a monitor measuring calls at once each
write their own), and only if it still exists.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from collections.abc import Callable
from typing import BinaryIO

# Numbers the event files of this process, so that its files have distinct names even within
# one second.
_file_numbers = itertools.count()
_held: set[str] = set()  # the files a writer of this process has open
_held_lock = threading.Lock()


def create_new_file(path: str) -> BinaryIO:
    """Open ``path`` for writing, failing with ``FileExistsError`` if it exists: never truncate."""
    return open(path, "xb")  # noqa: SIM115 - closed by the writer


def open_for_appending(path: str) -> BinaryIO:
    """Open the existing ``path`` to write at its end, failing with ``FileNotFoundError`` if it
    is gone (a file made again here would lack its version record)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND), "ab")


def event_file_name(number: int, seconds: float) -> str:
    """``events.out.tfevents.<seconds>.<host>.<pid>.tfthroughput-<number>.v2``.

    ``tf.summary``'s files end in ``.<pid>.<counter>.v2``: with ``tfthroughput-`` before the
    number, no name of ours can be one of theirs.

    Example:
        >>> event_file_name(3, 1796000000.5).endswith(f".{os.getpid()}.tfthroughput-3.v2")
        True
    """
    return "events.out.tfevents.%010d.%s.%d.tfthroughput-%d.v2" % (  # noqa: UP031 - TF's form
        seconds,
        socket.gethostname(),
        os.getpid(),
        number,
    )


def create_event_file(
    folder: str, wall_time: float, create_file: Callable[[str], BinaryIO] = create_new_file
) -> tuple[BinaryIO, str]:
    """A new event file of this process in ``folder`` (which must exist), and its path: the
    next number whose name no file has yet, so no existing file is ever truncated."""
    while True:
        path = os.path.join(folder, event_file_name(next(_file_numbers), wall_time))
        try:
            return create_file(path), path
        except FileExistsError:
            continue  # another writer has this name: take the next number


def hold(path: str) -> bool:
    """Mark ``path`` as open by a writer of this process; ``False`` if one holds it already.

    Example:
        >>> hold("/tmp/held-once"), hold("/tmp/held-once"), release("/tmp/held-once")
        (True, False, None)
    """
    with _held_lock:
        if path in _held:
            return False
        _held.add(path)
        return True


def release(path: str) -> None:
    """``path`` is no longer open by the writer that held it."""
    with _held_lock:
        _held.discard(path)
