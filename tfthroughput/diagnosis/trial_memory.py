"""The memory a piece of code adds to this process at its peak, over its own starting point.

``find_batch_size`` runs its trials one after another in one process. What an earlier trial
leaves behind (memory Keras's ``clear_session`` does not return, free heap pages the C
allocator keeps) must not count against a later one, and a later trial must not look small by
reusing pages an earlier one kept. So, before each trial, free memory is handed back to the
system (garbage collection, then glibc's ``malloc_trim``), the trial's starting RSS is read, and
its peak is taken relative to that start: from the kernel's own high-water mark, reset at the
start (``/proc/self/clear_refs``, Linux), or else by sampling RSS every 10 ms (psutil), which can
miss shorter spikes.

``tune`` measures each trial's memory the same way (``TuneTrial.memory_mib``), so this module
is the diagnosis room's named helper for both: internal (not in ``tfthroughput.diagnosis``'s
face), but importable by the rooms above it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import threading
from collections.abc import Iterator

import psutil

# How often RSS is sampled where the kernel's high-water mark cannot be reset, in seconds.
_RSS_INTERVAL = 0.01
_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"
_RESET_PEAK = "5"  # clear_refs: reset the peak RSS (VmHWM) to the current RSS, Linux >= 4.0


def release_free_memory() -> None:
    """Collect garbage and return the C heap's free pages to the system where glibc allows."""
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            pass


@contextlib.contextmanager
def collections_of_new_objects_only() -> Iterator[None]:
    """Garbage collections inside the block scan only the objects made inside it.

    A search's trials collect garbage before each trial (and ``tune``'s where each closes), so
    that a trial's memory is its own and the next one has the last one's. A full collection
    scans everything TensorFlow and Keras hold: 0.18 s each on the 2-core development machine,
    15 of them in a ``tune`` search of three trials and its confirmation (2.6 s of a 7.7 s
    search on a small model). ``gc.freeze`` moves what exists now into the permanent
    generation, which collections skip, and ``gc.unfreeze`` hands it back after the block;
    the trials' models are all made inside it, so they are still collected. Where the program
    froze objects itself (``gc.get_freeze_count()``), its choice is left alone.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def to_mib(count_bytes: int | None) -> float | None:
    """Bytes in MiB, the package's one unit for memory a user reads or types (``None`` stays
    ``None``).

    Example:
        >>> to_mib(3 * 2**20 + 2**19), to_mib(None)
        (3.5, None)
    """
    return None if count_bytes is None else count_bytes / 2**20


def rss() -> int:
    """This process's resident set size, in bytes."""
    return psutil.Process().memory_info().rss


def _reset_kernel_peak() -> bool:
    try:
        with open(_CLEAR_REFS, "w") as clear_refs:
            clear_refs.write(_RESET_PEAK)
        return _kernel_peak() is not None
    except OSError:
        return False


def _kernel_peak() -> int | None:
    """VmHWM, the kernel's record of the peak RSS, in bytes (``None`` where not available)."""
    try:
        with open(_STATUS) as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class PeakAdded:
    """Context manager: ``added`` is the peak RSS inside it minus the RSS at its start, in bytes.

    Call :func:`release_free_memory` first, so that the start does not include free pages a
    trial could reuse without adding to the RSS. ``exact`` tells whether the kernel's
    high-water mark was used (``True``) or RSS was sampled (``False``).
    """

    def __init__(self, interval: float = _RSS_INTERVAL) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled_peak = 0
        self.start = 0
        self.added = 0
        self.exact = False

    def _sample(self) -> None:
        process = psutil.Process()
        while not self._stop.wait(self._interval):
            self._sampled_peak = max(self._sampled_peak, process.memory_info().rss)

    def __enter__(self) -> PeakAdded:
        self.start = rss()
        self.exact = _reset_kernel_peak()
        if not self.exact:
            self._sampled_peak = self.start
            self._thread = threading.Thread(
                target=self._sample, name="tfthroughput-rss", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        peak = _kernel_peak() if self.exact else None
        if peak is None:
            peak = max(self._sampled_peak, rss())
        self.added = max(0, peak - self.start)
