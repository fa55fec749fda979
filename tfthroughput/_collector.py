"""Keras calls that Python's cyclic garbage collector does not interrupt.

Under a ``tf.distribute`` strategy every ``fit``, ``evaluate`` and ``predict`` makes
distributed iterators and drops them while they are still prefetching: the one Keras's
symbolic build takes a first batch from, dropped at the start of the call (in
``EpochIterator.reset``), and the epoch's own, at its end (TensorFlow then logs "GetNextFromShard
was cancelled"). Each leaves its per-device generator functions (``_init_func``, ``_next_func``,
``_finalize_func``, which remove themselves from TensorFlow's runtime when freed) and its
iterator handles in reference cycles, which only the cyclic collector frees, at whatever
allocation comes next. A collection that lands inside a call, while one of these iterators is
being torn down, can end the process with a segmentation fault (``docs/scale.md``).

The package's own repeated calls (``tune``'s trials, ``diagnose``'s timing) run with automatic
collection paused, so that garbage is freed between calls, never during one. Nothing is
collected on exit (the caller's timing stays the call's own): the next allocation after the
block collects as usual.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection inside the block; the collector's previous state
    (on, or off by the program's choice) is restored after it.

    Example:
        >>> import gc
        >>> with collector_paused():
        ...     gc.isenabled()
        False
        >>> gc.isenabled()
        True
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
