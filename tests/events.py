"""Read TensorBoard event files back, the way TensorBoard itself parses them."""

from __future__ import annotations

import glob
import os
from collections import defaultdict

import tensorflow as tf


def event_files(run_dir: str | os.PathLike) -> list[str]:
    """Event files in a run folder, oldest first."""
    return sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")), key=os.path.getmtime)


def read_scalars(path: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` from one event file or every file in a run folder."""
    files = [os.fspath(path)] if os.path.isfile(path) else event_files(path)
    scalars: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for file in files:
        for record in tf.data.TFRecordDataset(file):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "scalars":
                    scalars[value.tag].append((event.step, float(tf.make_ndarray(value.tensor))))
    return dict(scalars)
