"""Argument checks shared by the public functions, with Keras-style messages."""

from __future__ import annotations

import numbers
import os
import re
import tempfile


def check_positive_int(
    name: str, value: object, *, allow_none: bool = False, also: str = ""
) -> None:
    """Check that ``value`` is a positive int (NumPy ints too; booleans are refused).

    Args:
        name: The argument's name, quoted in the message.
        value: What the caller passed.
        allow_none: Accept ``None``. Defaults to False.
        also: Words appended to what was expected, e.g. ``"or a bool"``.

    Raises:
        TypeError: If ``value`` is not an int.
        ValueError: If it is zero or negative.
    """
    if value is None and allow_none:
        return
    expected = "a positive int" + (" or None" if allow_none else "") + (f" {also}" if also else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be {expected}. Received: {name}={value!r}")
    if value <= 0:
        raise ValueError(f"`{name}` must be {expected}. Received: {name}={value!r}")


def check_writable_folder(folder: str, *, name: str, value: object, owner: str) -> None:
    """Create ``folder`` if needed and check a file can be written in it.

    Args:
        folder: The folder the caller will write into.
        name: The argument that chose it, quoted in the message (e.g. ``"log_dir"``).
        value: What the caller passed for that argument.
        owner: Who needs the folder, for the message (e.g. ``"ProfileSteps"``).

    Raises:
        ValueError: If the folder cannot be created or written to, with the reason.
    """
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ValueError(
            f"`{name}` is not writable ({error.strerror or error}); {owner} needs to create "
            f"{folder!r}. Received: {name}={value!r}"
        ) from error


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
