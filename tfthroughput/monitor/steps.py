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


def trained_steps(
    iterations: int, last_batch: int | None, epoch_steps: int | None, steps_per_execution: int
) -> int:
    """Steps an epoch trained, from the optimizer's count over the epoch.

    Keras 3 (TensorFlow 2.21) counts one optimizer iteration more than it trains when an epoch
    of unknown length (a ``from_generator`` pipeline, a Python generator) runs one step per
    execution into the end of the data: 4 batches give 5 iterations, 4 batch hooks (the last
    with index 3) and the weights of 4 steps. The batch hooks then tell the steps trained.

    Args:
        iterations: The optimizer's iterations over the epoch.
        last_batch: Index of the epoch's last ``on_train_batch_end``, if any.
        epoch_steps: Keras's ``params["steps"]`` (``None`` when the length is unknown).
        steps_per_execution: The model's.

    Example:
        >>> trained_steps(5, 3, None, 1), trained_steps(4, 3, 4, 1), trained_steps(4, 5, None, 3)
        (4, 4, 4)
    """
    unknown_length = epoch_steps is None and steps_per_execution == 1
    if unknown_length and last_batch is not None and iterations == last_batch + 2:
        return iterations - 1
    return iterations
