"""diagnose's advice for a ``keras.utils.PyDataset``: its input is Python code run by workers,
not a tf.data pipeline, so the pipeline advice (``build_pipeline: ...``) becomes advice about
its workers, with the same measurement."""

from __future__ import annotations

from collections.abc import Sequence

from tfthroughput.diagnosis.recommendations import Recommendation


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
    pipeline = [rec for rec in advice if rec.action.startswith("build_pipeline")]
    if not pipeline:
        return list(advice)
    replaced = Recommendation(
        "PyDataset(workers=..., use_multiprocessing=True), or a tf.data pipeline "
        "(tfthroughput.build_pipeline)",
        f"{pipeline[0].reason} The input is a PyDataset with {workers}: more workers load "
        "batches in parallel (processes where __getitem__ holds the GIL), and a tf.data "
        "pipeline runs its stages in TensorFlow's threads.",
    )
    first = advice.index(pipeline[0])
    rest = [rec for rec in advice if rec not in pipeline]
    return [*rest[:first], replaced, *rest[first:]]
