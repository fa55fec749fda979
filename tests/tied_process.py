"""Servers a test starts that die with the test's process, however it ends.

A fixture's ``finally`` stops its server when the test ends, but not when the worker process
dies under it (a segfault in TensorFlow, ``os.abort``, a per-test timeout's kill): the server
would then outlive the suite, holding its port and a core. :func:`tied_popen` starts the
command under a small guard, this file run as a script, in a process group of its own; the
guard watches its parent and, once the parent is gone, kills the whole group (the guard, the
server and anything the server started).

The returned :class:`TiedProcess` stops like a ``Popen``: ``terminate()`` asks the server to
stop (the guard passes SIGTERM on and exits with the server), ``kill()`` kills the group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

# How often the guard checks that its parent is alive, in seconds.
_WATCH_INTERVAL = 0.2


class TiedProcess(subprocess.Popen):
    """``subprocess.Popen`` of the guard; ``pid`` is the guard's, which is also the group's id."""

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def tied_popen(args: list[str], **kwargs) -> TiedProcess:
    """``subprocess.Popen(args, **kwargs)`` whose process group dies with this process.

    ``start_new_session`` is always on (the guard leads the group); the other keyword
    arguments (``stdout``, ``env``, ``cwd``...) reach the command as they would through Popen.
    """
    kwargs.pop("start_new_session", None)
    return TiedProcess([sys.executable, __file__, *args], start_new_session=True, **kwargs)


def _guard(args: list[str]) -> int:
    parent = os.getppid()
    child = subprocess.Popen(args)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    while True:
        try:
            return child.wait(timeout=_WATCH_INTERVAL)
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != parent:  # the test's process died: take the server with it
            os.killpg(os.getpgid(0), signal.SIGKILL)
            time.sleep(1)  # not reached: SIGKILL ends this process too


if __name__ == "__main__":
    sys.exit(_guard(sys.argv[1:]))
