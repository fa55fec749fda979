"""Read TensorBoard event files back, the way TensorBoard itself parses them.

With TensorFlow installed the records are read with TensorFlow's own reader; where it is not
(the monitor's tests re-run under Keras's JAX backend with TensorFlow blocked), with
TensorBoard's, which TensorBoard uses without TensorFlow.
"""

from __future__ import annotations

import glob
import os
from collections import defaultdict
from collections.abc import Iterator

try:
    import tensorflow as tf
except ImportError:
    tf = None


def event_files(run_dir: str | os.PathLike) -> list[str]:
    """Event files in a run folder, oldest first."""
    return sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")), key=os.path.getmtime)


def read_scalars(path: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` from one event file or every file in a run folder."""
    files = [os.fspath(path)] if os.path.isfile(path) else event_files(path)
    scalars: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for file in files:
        for event in _events(file):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "scalars":
                    scalars[value.tag].append((event.step, _scalar(value.tensor)))
    return dict(scalars)


def summary_values(run_dir: str | os.PathLike, plugin_name: str) -> list[tuple[int, object]]:
    """``[(step, value), ...]`` of every summary value of one plugin in a run, in file order
    (``value.tag``, ``value.tensor``: e.g. the Custom Scalars layouts or text entries)."""
    return [
        (event.step, value)
        for file in event_files(run_dir)
        for event in _events(file)
        for value in event.summary.value
        if value.metadata.plugin_data.plugin_name == plugin_name
    ]


def read_layouts(run_dir: str | os.PathLike) -> list:
    """Every Custom Scalars ``Layout`` written into a run, in the order written."""
    from tensorboard.plugins.custom_scalar import layout_pb2

    return [
        layout_pb2.Layout.FromString(value.tensor.string_val[0])
        for _, value in summary_values(run_dir, "custom_scalars")
    ]


def read_events(file: str | os.PathLike) -> list:
    """Every ``Event`` record of one event file, in order."""
    return list(_events(os.fspath(file)))


def _events(file: str) -> Iterator:
    if tf is not None:
        for record in tf.data.TFRecordDataset(file):
            yield tf.compat.v1.Event.FromString(record.numpy())
    else:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

        yield from EventFileLoader(file).Load()


def _scalar(tensor) -> float:
    if tf is not None:
        return float(tf.make_ndarray(tensor))
    from tensorboard.util import tensor_util

    return float(tensor_util.make_ndarray(tensor))
