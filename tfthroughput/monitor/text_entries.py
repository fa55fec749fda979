"""Entries for TensorBoard's Text tab, written at once into a new event file of their own.

The package writes event files one way: TensorBoard's own pure-Python record writer on a file
made by :func:`~tfthroughput.monitor.event_files.create_event_file`. That needs no TensorFlow
(so it works under every Keras backend), and the file's name is one no ``tf.summary`` writer
makes, created exclusively, so nobody's file is ever replaced. The monitor streams its records
through :class:`~tfthroughput.monitor.event_writer.EventWriter`'s thread; the few entries
written once (the diagnosis report, tune's table, a profiler capture's note, the demo's
comparison) come here and are written on the caller's thread.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.record_writer import RecordWriter

from tfthroughput.monitor.event_files import create_event_file

_DT_STRING = 7


def text_summary(tag: str, text: str) -> summary_pb2.Summary:
    """A ``Summary`` holding ``text`` under ``tag`` for the Text tab, as ``tf.summary.text``
    stores it: a scalar string tensor with the text plugin's metadata."""
    tensor = tensor_pb2.TensorProto(
        dtype=_DT_STRING,
        string_val=[text.encode("utf-8")],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[]),
    )
    metadata = text_metadata.create_summary_metadata(display_name=tag, description="")
    return summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)]
    )


def write_text(log_dir: str | os.PathLike, entries: Mapping[str, str], step: int = 0) -> str:
    """Write each ``tag: text`` of ``entries`` (Markdown) at ``step`` into a new event file in
    ``log_dir`` (created if missing); returns the file's path.

    Args:
        log_dir: The run's folder.
        entries: Text-tab entries, by tag.
        step: The step they are shown at. Defaults to ``0``.

    Returns:
        The path of the event file written.

    Raises:
        OSError: If the folder or the file cannot be written.

    Example:
        >>> import tempfile
        >>> path = write_text(tempfile.mkdtemp(), {"notes/run": "**fast**"})
        >>> ".tfthroughput-" in os.path.basename(path)
        True
    """
    log_dir = os.fspath(log_dir)
    os.makedirs(log_dir, exist_ok=True)
    wall_time = time.time()
    file, path = create_event_file(log_dir, wall_time)
    events = [event_pb2.Event(wall_time=wall_time, file_version="brain.Event:2")]
    events += [
        event_pb2.Event(wall_time=wall_time, step=step, summary=text_summary(tag, text))
        for tag, text in entries.items()
    ]
    writer = RecordWriter(file)
    try:
        for event in events:
            writer.write(event.SerializeToString())
        writer.flush()
    finally:
        writer.close()
    return path
