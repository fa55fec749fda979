"""What a writer could not write in one ``fit``: counted, told once, and summed up at the end.

A repeated fault (a full disk fails every record after the first) is one problem, so it gives
one warning with its reason, not one per epoch or window; the count of records lost is given
when the writer closes. :class:`WriteFaults` holds that bookkeeping and composes the messages;
its owner (:class:`~tfthroughput.monitor.event_writer.EventWriter`) holds the lock and issues
the warnings on the caller's thread.
"""

from __future__ import annotations


class WriteFaults:
    """The faults of one writer. Not thread-safe: the owner holds its lock around every call.

    Args:
        where: The folder written to, as the messages name it.

    Example:
        >>> faults = WriteFaults("logs/hardware")
        >>> faults.handed_off()
        >>> faults.lost(1, "OSError: No space left on device", "epoch 1")
        >>> print(faults.due_message(at_close=False))
        GPUMonitor could not write to 'logs/hardware' (epoch 1: OSError: No space left on device). Training goes on; further write failures in this fit are counted and not warned about, and the count is given at its end.
        >>> faults.due_message(at_close=False) is None  # told once
        True
        >>> print(faults.due_message(at_close=True))
        GPUMonitor could not write to 'logs/hardware': 1 of 1 record(s) were not written (first failure: epoch 1: OSError: No space left on device).
    """  # noqa: E501

    def __init__(self, where: str) -> None:
        self._where = where
        self.records = 0  # handed off to the writer
        self.lost_records = 0
        self._first: str | None = None  # the first fault, as it will be told
        self._told = False

    def handed_off(self) -> None:
        """One more record handed to the writer."""
        self.records += 1

    def lost(self, count: int, reason: str, what: str | None = None) -> None:
        """``count`` records lost (0 for a fault that lost none); keep the first reason."""
        self.lost_records += count
        if self._first is None:
            self._first = f"{what}: {reason}" if what else reason

    def due_message(self, *, at_close: bool) -> str | None:
        """The warning due now, if any: the first fault once, and the count at the end."""
        if self._first is None:
            return None
        where = f"GPUMonitor could not write to {self._where!r}"
        if not self._told:
            self._told = True
            if at_close:
                return f"{where} ({self._first}); {self._count()}. Training was not affected."
            return (
                f"{where} ({self._first}). Training goes on; further write failures in this "
                "fit are counted and not warned about, and the count is given at its end."
            )
        if at_close and self.lost_records:
            return f"{where}: {self._count()} (first failure: {self._first})."
        return None

    def _count(self) -> str:
        return f"{self.lost_records} of {self.records} record(s) were not written"
