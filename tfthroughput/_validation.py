"""Argument checks shared by the public functions, with Keras-style messages."""

from __future__ import annotations

import numbers


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
