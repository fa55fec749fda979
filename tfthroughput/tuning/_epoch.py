"""The user's epoch length, which ``steps_per_execution`` must divide.

Keras runs whole executions: with ``steps_per_execution=128``, ``fit(..., steps_per_epoch=64)``
trains 128 steps per epoch, and ``steps_per_epoch=100`` with ``steps_per_execution=8`` trains
104 (measured on Keras 3 / TensorFlow 2.21). A choice that does not divide the epoch silently
trains more steps than asked, so ``tune`` tries only values that divide it, and says so.
"""

from __future__ import annotations

from tfthroughput._validation import check_positive_int


def epoch_steps(steps_per_epoch: object, data_batches: int | None, notes: list[str]) -> int | None:
    """Steps in one of the user's epochs: ``steps_per_epoch`` as given, else one pass over
    the data (``None`` when it is infinite or of unknown length).

    Raises:
        TypeError: If ``steps_per_epoch`` is not an int or None.
        ValueError: If it is not positive.

    Example:
        >>> notes = []
        >>> epoch_steps(None, 100, notes), notes[0][:45]
        (100, 'steps_per_execution divides the epoch (100 st')
    """
    given = check_positive_int("steps_per_epoch", steps_per_epoch, allow_none=True)
    epoch = given if given is not None else data_batches
    if epoch is not None:
        source = "steps_per_epoch" if given is not None else "one pass over the data"
        notes.append(
            f"steps_per_execution divides the epoch ({epoch} steps, {source}): Keras runs "
            "whole executions, so a value that does not divide it trains more steps than asked"
        )
    return epoch


def divides(steps_per_execution: int, epoch: int | None) -> bool:
    """Whether ``steps_per_execution`` keeps the epoch at the steps asked for.

    Example:
        >>> divides(8, 100), divides(4, 100), divides(64, None)
        (False, True, True)
    """
    return epoch is None or epoch % steps_per_execution == 0
