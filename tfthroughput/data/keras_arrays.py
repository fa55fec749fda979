"""NumPy arrays read the way ``fit`` and ``predict`` read them, for the tools that measure input.

``fit(x, y, batch_size=...)`` (TensorFlow backend) turns arrays into a ``tf.data`` pipeline
through Keras's array adapter: the arrays become one tensor each, and every batch is a
``tf.gather`` of its indices from them (in order without ``shuffle``, the last batch smaller
when the batch size does not divide the examples). :func:`keras_array_dataset` hands out
exactly that pipeline, so ``diagnose`` and ``find_batch_size`` time arrays as ``fit`` feeds
them. :func:`as_arrays` checks the arrays once, with one-line errors naming the argument, and
converts them to tensors once: every pipeline made of them afterwards (one per batch size)
reads the same tensors, so the arrays are copied once, not once per measurement.

Like :mod:`tfthroughput.data.keras_inputs` for a ``PyDataset``, this uses Keras's data
adapter (``keras.src``): Keras has no public way to get the pipeline ``fit`` makes of arrays.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import keras
import numpy as np

# Pipelines made here, with what they read (``"100 examples in batches of 16"``): Keras's
# pipeline over arrays, not one the user wrote, so tf.data stage advice does not apply (and
# serialising its graph to lint it would copy the arrays into a GraphDef).
_MADE_HERE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class Arrays:
    """Checked arrays, as tensors: ``x`` (and ``y``, ``None`` when unlabeled) and their length."""

    x: Any
    y: Any
    examples: int


def is_arrays(value: object) -> bool:
    """Whether ``value`` is what ``fit`` reads as arrays: an array, or a tuple, list or dict
    of them (not a ``tf.data.Dataset``, a ``PyDataset`` or a generator).

    Example:
        >>> is_arrays(np.zeros((4, 2))), is_arrays({"a": np.zeros(4)}), is_arrays([1.0])
        (True, True, False)
    """
    if isinstance(value, (tuple, list, dict)):
        leaves = keras.tree.flatten(value)
        return bool(leaves) and all(_is_array(leaf) for leaf in leaves)
    return _is_array(value)


def _is_array(value: object) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def as_arrays(x: object, y: object = None, *, x_name: str = "x", y_name: str = "y") -> Arrays:
    """``x`` and ``y`` checked and converted to tensors, once.

    Args:
        x: An array, or a tuple, list or dict of arrays, the model's inputs.
        y: The targets, the same way, or ``None`` (unlabeled, as ``fit(x)`` takes them).
        x_name: The argument ``x`` was passed as, for the errors. Defaults to ``"x"``.
        y_name: The argument ``y`` was passed as. Defaults to ``"y"``.

    Raises:
        TypeError: If a leaf of ``x`` or ``y`` is not an array.
        ValueError: If an array has no first axis, they differ in length, or hold nothing.

    Example:
        >>> as_arrays(np.zeros((4, 2)), np.zeros(3))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `x` and `y` must hold the same number of examples (their first axis)...
    """
    lengths = {x_name: _lengths(x_name, x)}
    if y is not None:
        lengths[y_name] = _lengths(y_name, y)
    found = {length for values in lengths.values() for length in values}
    if len(found) > 1:
        described = ", ".join(f"{name} with {sorted(set(v))}" for name, v in lengths.items())
        raise ValueError(
            f"`{x_name}`{f' and `{y_name}`' if y is not None else ''} must hold the same number "
            f"of examples (their first axis), as fit requires. Received: {described} examples"
        )
    examples = found.pop()
    if examples == 0:
        raise ValueError(f"`{x_name}` must hold at least one example. Received: 0 examples")
    return Arrays(_tensors(x), None if y is None else _tensors(y), examples)


def _lengths(name: str, value: object) -> list[int]:
    """The first-axis length of every array in ``value``, or a one-line error naming it."""
    leaves = keras.tree.flatten(value)
    if not leaves:
        raise ValueError(f"`{name}` must hold at least one array. Received: {name}={value!r}")
    lengths = []
    for leaf in leaves:
        if not _is_array(leaf):
            raise TypeError(
                f"`{name}` must be arrays (NumPy arrays or tensors, or a tuple, list or dict of "
                f"them). Received: {name} holding {type(leaf).__name__} {_short(leaf)}"
            )
        if len(leaf.shape) == 0 or leaf.shape[0] is None:
            raise ValueError(
                f"`{name}` must be arrays with a first axis of examples. Received: {name} holding "
                f"an array of shape {tuple(leaf.shape)}"
            )
        lengths.append(int(leaf.shape[0]))
    return lengths


def _tensors(value: object) -> Any:
    """NumPy arrays as tensors (the one copy; tensors pass as they are), tuples kept as
    tuples as Keras's adapter keeps them."""
    import tensorflow as tf

    def convert(leaf: Any) -> Any:
        return tf.convert_to_tensor(leaf) if isinstance(leaf, np.ndarray) else leaf

    return keras.tree.map_structure(convert, keras.tree.lists_to_tuples(value))


def keras_array_dataset(arrays: Arrays, batch_size: int, *, full_batches: bool = False) -> Any:
    """One pass over ``arrays`` as the ``tf.data.Dataset`` ``fit``/``predict`` make of them.

    Args:
        arrays: From :func:`as_arrays`.
        batch_size: Examples per batch (the last batch holds the rest, as in ``fit``).
        full_batches: Leave out a last, smaller batch (for timing one batch size).
            Defaults to ``False``.

    Returns:
        A finite ``tf.data.Dataset`` of ``(x, y)`` batches (``x`` alone when unlabeled), in
        order.
    """
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

    adapter = ArrayDataAdapter(arrays.x, arrays.y, batch_size=batch_size, shuffle=False)
    dataset = adapter.get_tf_dataset()
    if full_batches:
        dataset = dataset.take(arrays.examples // batch_size)
    _MADE_HERE[dataset] = f"{arrays.examples} examples in batches of {batch_size}"
    return dataset


def made_from_arrays(dataset: object) -> bool:
    """Whether ``dataset`` is a pipeline :func:`keras_array_dataset` made of arrays."""
    try:
        return dataset in _MADE_HERE
    except TypeError:
        return False


def arrays_read(dataset: object) -> str:
    """What a :func:`keras_array_dataset` pipeline reads: ``"100 examples in batches of 16"``."""
    return _MADE_HERE.get(dataset, "arrays")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
