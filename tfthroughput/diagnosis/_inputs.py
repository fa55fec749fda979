"""What diagnose measures, whatever it is given: a ``tf.data.Dataset`` as it is, and a
``keras.utils.PyDataset`` or NumPy arrays as the ``tf.data`` pipeline ``fit`` and ``predict``
make of them (Keras's own data adapters, data/keras_inputs.py and data/keras_arrays.py); and
the input advice that fits what was given."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from tfthroughput._validation import check_positive_int
from tfthroughput.data.keras_arrays import (
    arrays_read,
    as_arrays,
    is_arrays,
    keras_array_dataset,
    made_from_arrays,
)
from tfthroughput.data.keras_inputs import (
    check_not_one_pass,
    is_py_dataset,
    keras_dataset,
    made_from_py_dataset,
    py_dataset_workers,
)
from tfthroughput.diagnosis.array_advice import for_arrays
from tfthroughput.diagnosis.py_dataset_advice import for_py_dataset
from tfthroughput.diagnosis.recommendations import Recommendation


@contextlib.contextmanager
def measured_input(dataset: object, y: object, batch_size: object) -> Iterator[Any]:
    """The ``tf.data.Dataset`` to measure (checked by the caller): ``dataset`` itself, or
    Keras's pipeline over a PyDataset (its workers stopped on exit) or over arrays ``dataset``
    and ``y`` in batches of ``batch_size`` (``None``: 32, as ``fit`` and ``predict``).

    Raises:
        TypeError: If ``dataset`` is a Python generator or iterator, or an array is no array.
        ValueError: If ``y`` or ``batch_size`` is given for data that is not arrays, or the
            arrays are not arrays of examples of one length.
    """
    if is_arrays(dataset):
        size = 32 if batch_size is None else check_positive_int("batch_size", batch_size)
        # Checked and made into tensors once; every measurement reads the same tensors.
        yield keras_array_dataset(as_arrays(dataset, y, x_name="dataset"), size)
        return
    for name, value in (("y", y), ("batch_size", batch_size)):
        if value is not None:
            raise ValueError(
                f"`{name}` is for NumPy arrays only: a dataset holds its own targets and "
                f"batches. Received: {name}={_short(value)} with dataset of type "
                f"{type(dataset).__name__}"
            )
    if is_py_dataset(dataset):  # timed as fit reads it: through Keras's adapter, its workers
        with keras_dataset(dataset) as made:
            yield made
        return
    check_not_one_pass("dataset", dataset)
    yield dataset


def split_targets(model: object, dataset: object, y: object) -> tuple[object, object]:
    """``(x, y)`` given as one tuple, as ``find_batch_size(build, (x, y))`` takes it, split
    into ``x`` and ``y`` for a model of one input, where ``fit`` would fail on it (it reads a
    tuple as one array per input); anything else as given.

    Example:
        >>> import numpy as np
        >>> class OneInput:
        ...     inputs = [None]
        >>> x, y = np.zeros((4, 2)), np.zeros((4, 1))
        >>> split_targets(OneInput(), (x, y), None)[1] is y
        True
    """
    if y is not None or not isinstance(dataset, tuple) or len(dataset) != 2:
        return dataset, y
    try:
        inputs = len(model.inputs)
    except Exception:  # noqa: BLE001 - an unbuilt subclassed model: read as fit reads it
        return dataset, y
    if inputs == 1 and is_arrays(dataset[0]) and is_arrays(dataset[1]):
        return dataset[0], dataset[1]
    return dataset, y


def input_advice(
    advice: Sequence[Recommendation], dataset: object, call: str = "fit"
) -> tuple[Recommendation, ...]:
    """``advice`` with its tf.data pipeline items about what ``dataset`` really is: a
    PyDataset's workers, or what Keras does with arrays."""
    if made_from_py_dataset(dataset):
        return tuple(for_py_dataset(advice, py_dataset_workers(dataset)))
    if made_from_arrays(dataset):
        return tuple(for_arrays(advice, arrays_read(dataset), call))
    return tuple(advice)


def _short(value: object) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."
