"""Hand one measurement to every sink; a faulty sink is reported once and never stops training.

:class:`SinkFanOut` is how ``tfthroughput.monitor`` drives the sinks of one run (its TensorBoard
writer first, then the user's ``GPUMonitor(sinks=[...])``): the sinks room owns what a sink may
expect of its caller (opened once before the first write, every write in order, closed once,
a fault never raised into training), so the monitor imports it from here rather than writing
that contract again. Not part of the ``tfthroughput.sinks`` face: a user writes a
:class:`~tfthroughput.sinks.Sink`, never a fan-out.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.sinks.sink import Measurement, RunInfo, Sink


class SinkFanOut:
    """The sinks of one ``fit``, opened together and written together.

    Args:
        sinks: The sinks, in the order they are written.

    Example:
        >>> from tfthroughput.sinks.sink import RunInfo, Sink
        >>> class Count(Sink):
        ...     def __init__(self):
        ...         self.written = 0
        ...     def write(self, measurement):
        ...         self.written += 1
        >>> sink = Count()
        >>> fan_out = SinkFanOut([sink])
        >>> fan_out.open(RunInfo("logs/hardware", "logs"))
        >>> fan_out.close()
        >>> sink.written
        0
    """

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self._sinks = list(sinks)
        self._faults: dict[int, int] = {}  # sink position -> faults after the first

    def open(self, run: RunInfo) -> None:
        """Open every sink; if one raises, close those already open and re-raise (a
        misconfiguration the user can fix, before the first step)."""
        for position, sink in enumerate(self._sinks):
            try:
                sink.open(run)
            except BaseException:
                for opened in self._sinks[:position]:
                    self._close(opened)
                self._sinks = []
                raise

    def write(self, measurement: Measurement) -> None:
        """Hand ``measurement`` to every sink; a sink's first fault is warned about, later
        ones counted (training never sees the exception)."""
        for position, sink in enumerate(self._sinks):
            try:
                sink.write(measurement)
            except Exception as error:  # noqa: BLE001 - a sink's fault must not stop training
                count = self._faults.get(position)
                self._faults[position] = 0 if count is None else count + 1
                if count is None:
                    warnings.warn(
                        f"GPUMonitor's sink {type(sink).__name__} failed to take the "
                        f"{measurement.kind} at step {measurement.step}: {error!r}. Warned "
                        "once; later faults are counted.",
                        MonitoringWarning,
                        stacklevel=2,
                    )

    def close(self) -> None:
        """Close every sink, and say how many later writes a faulty sink also failed."""
        for position, sink in enumerate(self._sinks):
            self._close(sink)
            if self._faults.get(position):
                warnings.warn(
                    f"GPUMonitor's sink {type(sink).__name__} failed {self._faults[position]} "
                    "more time(s) after the first warning in this fit.",
                    MonitoringWarning,
                    stacklevel=2,
                )
        self._sinks = []

    @staticmethod
    def _close(sink: Sink) -> None:
        try:
            sink.close()
        except Exception as error:  # noqa: BLE001
            warnings.warn(
                f"GPUMonitor could not close its sink {type(sink).__name__}: {error!r}",
                MonitoringWarning,
                stacklevel=3,
            )
