"""Bytes of one batch, from a dataset's ``element_spec``: what crosses from the host to the device.

:func:`tfthroughput.describe_pipeline` shows it for every pipeline, and, for one built with
``augment_on="device"``, the bytes the model receives after the device work beside it: a
``uint8`` image is one byte per value where ``float32`` is four.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def batch_bytes(element_spec: Any, batch_size: int | None) -> int | None:
    """Bytes of one batch of ``batch_size`` examples of ``element_spec`` (batched specs).

    Args:
        element_spec: A batched dataset's ``element_spec`` (axis 0 is the batch), or an
            unbatched one with ``batch_size=None`` (then the bytes of one element).
        batch_size: Examples per batch; ``None`` for an unbatched spec.

    Returns:
        The bytes, or ``None`` where they are not fixed (strings, ragged or sparse tensors,
        unknown shapes).

    Example:
        >>> spec = (tf.TensorSpec([None, 32, 32, 3], tf.uint8), tf.TensorSpec([None], tf.int64))
        >>> batch_bytes(spec, 64)
        197120
    """
    total = 0
    for spec in tf.nest.flatten(element_spec):
        if not isinstance(spec, tf.TensorSpec) or spec.dtype == tf.string:
            return None
        shape = spec.shape[1:] if batch_size is not None else spec.shape
        if not shape.is_fully_defined():
            return None
        total += shape.num_elements() * spec.dtype.size * (batch_size or 1)
    return total


def bytes_text(count: int) -> str:
    """``count`` bytes for people: ``"4.7 MiB"``, ``"196.0 KiB"``, ``"512 B"``.

    Example:
        >>> bytes_text(4_915_200)
        '4.7 MiB'
    """
    if count < 1024:
        return f"{count} B"
    if count < 1024**2:
        return f"{count / 1024:.1f} KiB"
    return f"{count / 1024**2:.1f} MiB"
