"""The monitor's own sink: its TensorBoard event writer, behind the sink interface.

Always the first sink of a ``fit``: the event files are the monitor's record (the Custom Scalars
layout, the cluster summary and ``tfthroughput report`` read them). Epochs are written at
``step=epoch``, windows at the global step, as before sinks existed.
"""

from __future__ import annotations

from tfthroughput.monitor.event_writer import EventWriter
from tfthroughput.sinks.sink import Measurement, RunInfo, Sink


class TensorBoardSink(Sink):
    """Writes each measurement's scalars with the run's :class:`EventWriter`.

    Args:
        writer: The run's event writer, opened in ``on_train_begin``; closed by :meth:`close`.
    """

    def __init__(self, writer: EventWriter) -> None:
        self.writer = writer

    def open(self, run: RunInfo) -> None:
        """Nothing to do: the writer is opened with the run folder, before any sink."""

    def write(self, measurement: Measurement) -> None:
        what = "epoch" if measurement.kind == "epoch" else "the window at step"
        self.writer.write(measurement.tensorboard_step, measurement.scalars, what=what)

    def close(self) -> None:
        self.writer.close()
