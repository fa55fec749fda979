"""What diagnose reads of the pipeline it measures: its lint and its slowest stage."""

from __future__ import annotations

import tensorflow as tf

from tfthroughput.data.autotune import StageMeasurement, measure_pipeline
from tfthroughput.data.keras_arrays import made_from_arrays
from tfthroughput.data.keras_inputs import made_from_py_dataset
from tfthroughput.data.lint import PipelineLint, lint_pipeline


def lint_or_none(dataset: tf.data.Dataset) -> PipelineLint | None:
    """The dataset's lint, or ``None`` when its graph cannot be serialised (e.g. a dataset
    holding resources TensorFlow cannot write out), or when it is Keras's generator over a
    ``PyDataset`` (its work is Python code, not tf.data stages to advise on), or over arrays
    (Keras's own stages; serialising their graph would copy the arrays)."""
    if made_from_py_dataset(dataset) or made_from_arrays(dataset):
        return None
    try:
        return lint_pipeline(dataset)
    except (tf.errors.OpError, ValueError):
        return None


def slowest_stage(dataset: tf.data.Dataset, steps: int) -> StageMeasurement | None:
    """The stage with the largest share of the pipeline's work, or ``None`` if the profiler
    is in use elsewhere (the recommendation then stays general)."""
    try:
        stages = measure_pipeline(dataset, steps).stages
    except RuntimeError:
        return None
    return max(stages, key=lambda stage: stage.share, default=None)
