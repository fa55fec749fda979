"""diagnose's advice for a ``keras.utils.PyDataset``: its input is Python code run by workers,
not a tf.data pipeline, so the pipeline advice (``build_pipeline: ...``) becomes advice about
its workers, with the same measurement."""

from __future__ import annotations

from collections.abc import Sequence

from tfthroughput.diagnosis.recommendations import Recommendation, replace_pipeline_advice


def for_py_dataset(advice: Sequence[Recommendation], workers: str) -> list[Recommendation]:
    """``advice`` with its tf.data pipeline items replaced by one about the PyDataset.

    Args:
        advice: diagnose's recommendations, as made for a tf.data input.
        workers: What the PyDataset runs with, e.g. ``"2 worker threads"``.

    Example:
        >>> advice = [Recommendation("build_pipeline: cache", "40% of each fit step waits")]
        >>> for_py_dataset(advice, "no workers")[0].action[:38]
        'PyDataset(workers=..., use_multiproces'
    """
    return replace_pipeline_advice(
        advice,
        lambda reason: Recommendation(
            "PyDataset(workers=..., use_multiprocessing=True), or a tf.data pipeline "
            "(tfthroughput.build_pipeline)",
            f"{reason} The input is a PyDataset with {workers}: more workers load "
            "batches in parallel (processes where __getitem__ holds the GIL), and a tf.data "
            "pipeline runs its stages in TensorFlow's threads.",
        ),
    )
