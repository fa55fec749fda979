"""Write tune's table to TensorBoard's Text tab, without TensorFlow (tensorboard's own writer)."""

from __future__ import annotations

import os
import time

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.record_writer import RecordWriter

from tfthroughput.monitor.event_writer import create_event_file


def _text_summary(tag: str, text: str) -> summary_pb2.Summary:
    tensor = tensor_pb2.TensorProto(
        dtype=7,  # DT_STRING
        string_val=[text.encode("utf-8")],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[]),
    )
    metadata = text_metadata.create_summary_metadata(display_name=tag, description="")
    return summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)]
    )


def write_text(log_dir: str, tag: str, text: str, json_text: str) -> str:
    """Write ``text`` (as a preformatted block) under ``tag``, and the JSON under
    ``tag + "_json"``, in a new event file in ``log_dir``; returns the file's path.

    Written at once, on the caller's thread: two records at the end of a search, where the
    monitor's background writer (made for a training loop) would only add a thread.
    """
    log_dir = os.fspath(log_dir)
    os.makedirs(log_dir, exist_ok=True)
    wall_time = time.time()
    file, path = create_event_file(log_dir, wall_time)
    block = "\n".join("    " + line for line in text.splitlines())  # Markdown code block
    events = [
        event_pb2.Event(wall_time=wall_time, file_version="brain.Event:2"),
        event_pb2.Event(wall_time=wall_time, step=0, summary=_text_summary(tag, block)),
        event_pb2.Event(
            wall_time=wall_time, step=0, summary=_text_summary(tag + "_json", json_text)
        ),
    ]
    writer = RecordWriter(file)
    try:
        for event in events:
            writer.write(event.SerializeToString())
        writer.flush()
    finally:
        writer.close()
    return path
