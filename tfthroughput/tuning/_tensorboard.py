"""Write tune's table to TensorBoard's Text tab, without TensorFlow (tensorboard's own writer)."""

from __future__ import annotations

import os

from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.plugins.text import metadata as text_metadata

from tfthroughput.monitor.events import EventWriter


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
    ``tag + "_json"``, in a new event file in ``log_dir``; returns the file's path."""
    writer = EventWriter(os.fspath(log_dir), os.fspath(log_dir))
    try:
        block = "\n".join("    " + line for line in text.splitlines())  # Markdown code block
        writer._write_summary(0, _text_summary(tag, block), tag)
        writer._write_summary(0, _text_summary(tag + "_json", json_text), tag + "_json")
        return writer._writer._writer.name
    finally:
        writer.close()
