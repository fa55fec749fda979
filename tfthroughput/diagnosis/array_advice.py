"""diagnose's advice for NumPy arrays: ``fit`` and ``predict`` read them through Keras's array
adapter, not a pipeline the user wrote, so the pipeline advice (``build_pipeline: ...``)
becomes advice about what Keras does with arrays, with the same measurement."""

from __future__ import annotations

from collections.abc import Sequence

from tfthroughput.diagnosis.recommendations import Recommendation, replace_pipeline_advice


def for_arrays(
    advice: Sequence[Recommendation], read: str, call: str = "fit"
) -> list[Recommendation]:
    """``advice`` with its tf.data pipeline items replaced by one about the arrays.

    Args:
        advice: diagnose's recommendations, as made for a tf.data input.
        read: What the arrays hold, e.g. ``"100 examples in batches of 16"``.
        call: ``"fit"`` or ``"predict"``, the call that reads them. Defaults to ``"fit"``.

    Example:
        >>> advice = [Recommendation("build_pipeline: cache", "40% of each fit step waits")]
        >>> for_arrays(advice, "100 examples in batches of 16")[0].action[:41]
        'tfthroughput.build_pipeline((x, y), batch'
    """
    return replace_pipeline_advice(
        advice,
        lambda reason: Recommendation(
            "tfthroughput.build_pipeline((x, y), batch_size=...) in place of the arrays "
            "(x alone when unlabeled)",
            f"{reason} The input is NumPy arrays ({read}): {call} gathers each batch from "
            "them in one tf.data stage of Keras's array adapter, on the CPU, then copies it "
            "to the device; a tf.data pipeline built with build_pipeline prepares and copies "
            "the next batches in parallel while the step runs (overlapping the copy), and can "
            "cache the preprocessed examples.",
        ),
    )
