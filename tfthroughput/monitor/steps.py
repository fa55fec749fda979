"""Optimizer steps a Keras model has taken, read the same way on every backend."""

from __future__ import annotations


def optimizer_steps(model: object) -> int | None:
    """``model.optimizer.iterations`` as an int, or ``None`` when there is none to read.

    Example:
        >>> optimizer_steps(object()) is None
        True
    """
    optimizer = getattr(model, "optimizer", None)
    iterations = getattr(optimizer, "iterations", None)
    if iterations is None:
        return None
    try:
        # Keras's own scalar conversion, on every backend (a torch tensor on a GPU too);
        # without the NumPy round trip that warns about `__array__` under NumPy 2.
        return int(iterations)
    except Exception:  # noqa: BLE001 - the caller falls back to Keras's own step count
        return None
