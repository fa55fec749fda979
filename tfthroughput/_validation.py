"""Argument checks shared by the public functions, with Keras-style messages; and the one
reading of what a batch holds (:func:`leading_dimension`), which every room needs where it is
given the user's data."""

from __future__ import annotations

import numbers
import os
import re
import sys
import tempfile
from typing import Any


def check_positive_int(
    name: str, value: object, *, allow_none: bool = False, also: str = ""
) -> int | None:
    """Check that ``value`` is a positive int (NumPy ints too; booleans are refused).

    Args:
        name: The argument's name, quoted in the message.
        value: What the caller passed.
        allow_none: Accept ``None``. Defaults to False.
        also: Words appended to what was expected, e.g. ``"or a bool"``.

    Returns:
        ``value`` as a plain Python ``int`` (``None`` stays ``None``), ready for APIs and
        messages that expect one.

    Raises:
        TypeError: If ``value`` is not an int.
        ValueError: If it is zero or negative.

    Example:
        >>> import numpy as np
        >>> check_positive_int("batch_size", np.int64(32))
        32
        >>> check_positive_int("batch_size", 0)
        Traceback (most recent call last):
        ...
        ValueError: `batch_size` must be a positive int. Received: batch_size=0
    """
    if value is None and allow_none:
        return None
    expected = "a positive int" + (" or None" if allow_none else "") + (f" {also}" if also else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be {expected}. Received: {name}={value!r}")
    if value <= 0:
        raise ValueError(f"`{name}` must be {expected}. Received: {name}={value!r}")
    return int(value)


def check_dataset(name: str, value: object) -> None:
    """Check that ``value`` is a ``tf.data.Dataset``, without importing TensorFlow.

    A dataset can only exist once the caller has imported TensorFlow, so this module (imported
    by rooms that run without TensorFlow) reads it from ``sys.modules``.

    Raises:
        TypeError: If it is not a dataset, naming the argument, the value and its type.

    Example:
        >>> check_dataset("dataset", [1, 2])
        Traceback (most recent call last):
        ...
        TypeError: `dataset` must be a tf.data.Dataset. Received: dataset=[1, 2] of type list
    """
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(value, tf.data.Dataset):
        raise TypeError(
            f"`{name}` must be a tf.data.Dataset. Received: {name}={value!r} "
            f"of type {type(value).__name__}"
        )


def check_callable(name: str, value: object) -> None:
    """Check that ``value`` can be called (a clock, a factory).

    Raises:
        TypeError: If it cannot, naming the argument and the value.

    Example:
        >>> check_callable("clock", 1.5)
        Traceback (most recent call last):
        ...
        TypeError: `clock` must be callable. Received: clock=1.5
    """
    if not callable(value):
        raise TypeError(f"`{name}` must be callable. Received: {name}={value!r}")


def check_bool(name: str, value: object) -> bool:
    """Check that ``value`` is a bool (not merely truthy: ``0``, ``"no"`` and ``None`` are refused).

    Raises:
        TypeError: If it is not a bool, naming the argument and the value.

    Example:
        >>> check_bool("update_logs", "yes")
        Traceback (most recent call last):
        ...
        TypeError: `update_logs` must be a bool. Received: update_logs='yes'
    """
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool. Received: {name}={value!r}")
    return value


def check_writable_folder(name: str, path: object) -> str:
    """Create the folder ``path`` if needed and check that this process can write in it.

    Run it before long work that ends by writing there (training, then a TensorBoard log), so
    that a typo or a read-only place fails at once instead of after the work.

    Args:
        name: The argument's name, quoted in the message (e.g. ``"log_dir"`` or
            ``"--log-dir"``).
        path: The folder, as a string or ``os.PathLike``.

    Returns:
        ``path`` as a string.

    Raises:
        TypeError: If ``path`` is not a string or ``os.PathLike``.
        ValueError: If the folder cannot be created or written to, with the system's reason.

    Example:
        >>> import tempfile
        >>> check_writable_folder("log_dir", tempfile.gettempdir()) == tempfile.gettempdir()
        True
        >>> check_writable_folder("log_dir", "/dev/null/logs")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `log_dir` must be a folder ... Received: log_dir='/dev/null/logs' (...)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"`{name}` must be a folder path. Received: {name}={path!r}")
    folder = os.fspath(path)
    try:
        os.makedirs(folder, exist_ok=True)
        # Writing is the only reliable test: permissions, read-only mounts and quotas all show.
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ValueError(
            f"`{name}` must be a folder this process can create and write to. "
            f"Received: {name}={folder!r} ({error})"
        ) from error
    return folder


def check_folder_name(name: str, value: object) -> None:
    """Check that ``value`` is one folder name (a TensorBoard run), not a path.

    Raises:
        ValueError: If it is not a non-empty string without a path separator.
    """
    if not isinstance(value, str) or not value or os.sep in value or value in (".", ".."):
        raise ValueError(f"`{name}` must be a non-empty folder name. Received: {name}={value!r}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|min|h)\s*$")
_SECONDS_PER_UNIT = {"s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0}


def parse_duration(name: str, value: object) -> float:
    """Seconds in a duration written with its unit: ``"30s"``, ``"5min"``, ``"1.5h"``.

    Args:
        name: The argument's name, quoted in the message.
        value: What the caller passed: a string, a number and a unit (``s``, ``sec``, ``min``
            or ``h``).

    Returns:
        The duration in seconds, a positive float.

    Raises:
        TypeError: If ``value`` is not a string.
        ValueError: If it has no unit, an unknown unit, or is not positive.

    Example:
        >>> parse_duration("cooldown", "10min")
        600.0
    """
    expected = 'a duration with its unit, e.g. "30s", "5min" or "1h"'
    if not isinstance(value, str):
        raise TypeError(f"`{name}` must be {expected}. Received: {name}={value!r}")
    match = _DURATION.match(value)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"`{name}` must be {expected}. Received: {name}={value!r}")
    return float(match.group(1)) * _SECONDS_PER_UNIT[match.group(2)]


def check_model(model: object, *, returned_by: str | None = None, compiled: bool = True) -> Any:
    """``model`` itself, once it is a ``keras.Model`` (compiled, unless ``compiled=False``).

    The one model check of the package: ``diagnose`` checks the model it is given,
    ``diagnose(mode="inference")`` the same without the compile check (``predict`` needs no
    optimizer), and ``tune`` and ``find_batch_size`` the model their ``build_model`` returns.

    Args:
        model: The value to check.
        returned_by: The argument that built ``model`` (``"build_model"``), so the message
            names what the user passed. Defaults to ``None``: ``model`` is the argument.
        compiled: Whether ``model`` must be compiled with an optimizer. Defaults to ``True``.

    Returns:
        ``model``.

    Raises:
        TypeError: If ``model`` is not a ``keras.Model``.
        ValueError: If ``compiled`` and ``model`` has no optimizer.
    """
    import keras  # here, not above: the command line checks its folders before Keras loads

    if returned_by is None:
        must, received = "`model` must be", f"model={model!r}"
    else:
        must, received = f"`{returned_by}` must return", repr(model)
    if not isinstance(model, keras.Model):
        kind = "a compiled keras.Model" if compiled and returned_by else "a keras.Model"
        raise TypeError(f"{must} {kind}. Received: {received} of type {type(model).__name__}")
    if compiled and (not getattr(model, "compiled", False) or model.optimizer is None):
        where = "inside it" if returned_by else "first"
        raise ValueError(
            f"{must} compiled with an optimizer and a loss: call model.compile(...) {where}. "
            f"Received: model={model.name!r}, not compiled"
        )
    return model


def first_array(batch: object) -> Any:
    """The first array of ``batch`` in ``tf.nest`` and ``keras.tree`` order (a dict's values by
    sorted key, a tuple's or list's in order, ``None`` skipped), or ``None`` if it holds none.

    Anything with a ``shape`` is an array: NumPy, TensorFlow (tensors in a ``tf.data`` graph
    too, and ``tf.TensorSpec``), JAX, PyTorch.
    """
    if hasattr(batch, "shape"):
        return batch
    if isinstance(batch, dict):
        try:
            keys = sorted(batch)
        except TypeError:  # keys of mixed types: tf.nest would refuse them as well
            keys = list(batch)
        children = [batch[key] for key in keys]
    elif isinstance(batch, (tuple, list)):
        children = list(batch)
    else:
        return None
    for child in children:
        found = first_array(child)
        if found is not None:
            return found
    return None


def leading_dimension(batch: object) -> int | None:
    """The examples in ``batch``: the leading dimension of its first array (:func:`first_array`),
    or ``None`` where that is unknown (no array, a scalar, a dimension not known statically).

    The package's one reading of it: the monitor counts the examples a ``fit`` trains with it,
    ``benchmark_dataset`` the elements it reads, the diagnoses and ``tune`` a batch's size.

    Example:
        >>> import numpy as np
        >>> leading_dimension({"label": np.zeros(8), "image": np.zeros((8, 4))})
        8
        >>> leading_dimension((np.float32(1.0),)) is None  # a scalar: no batch dimension
        True
    """
    shape = getattr(first_array(batch), "shape", None)
    if shape is None or not len(shape) or shape[0] is None:
        return None
    return int(shape[0])
