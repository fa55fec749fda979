"""The user's epoch length, which ``steps_per_execution`` must divide.

Keras runs whole executions: with ``steps_per_execution=128``, ``fit(..., steps_per_epoch=64)``
trains 128 steps per epoch, and ``steps_per_epoch=6`` with ``steps_per_execution=4`` trains 8
(measured on Keras 3 / TensorFlow 2.21). A choice that does not divide the epoch silently
trains more steps than asked, so ``tune`` tries only values that divide ``steps_per_epoch``
when it is given, and says so. An epoch that ends with the data (no ``steps_per_epoch``) needs
no such care: Keras stops at the data's end (10 batches with ``steps_per_execution=4``: 10
steps per epoch, measured the same way).
"""

from __future__ import annotations

from tfthroughput._validation import check_positive_int


def epoch_steps(steps_per_epoch: object, notes: list[str]) -> int | None:
    """``steps_per_epoch`` as checked, with a note when it is given (``None`` when not).

    Raises:
        TypeError: If ``steps_per_epoch`` is not an int or None.
        ValueError: If it is not positive.

    Example:
        >>> notes = []
        >>> epoch_steps(100, notes), notes[0][:45]
        (100, 'steps_per_execution divides the epoch (100 st')
        >>> epoch_steps(None, [])
    """
    given = check_positive_int("steps_per_epoch", steps_per_epoch, allow_none=True)
    if given is not None:
        notes.append(
            f"steps_per_execution divides the epoch ({given} steps, steps_per_epoch): Keras "
            "runs whole executions, so a value that does not divide it trains more steps than "
            "asked"
        )
    return given


def divides(steps_per_execution: int, epoch: int | None) -> bool:
    """Whether ``steps_per_execution`` keeps the epoch at the steps asked for.

    Example:
        >>> divides(8, 100), divides(4, 100), divides(64, None)
        (False, True, True)
    """
    return epoch is None or epoch % steps_per_execution == 0
