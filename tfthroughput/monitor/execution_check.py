"""A warning for a ``fit`` whose epoch is not a whole number of executions.

Keras runs whole executions of ``steps_per_execution`` steps: with ``steps_per_execution=128``,
``fit(..., steps_per_epoch=64)`` trains 128 steps per epoch, and ``steps_per_epoch=6`` with
``steps_per_execution=4`` trains 8 (measured on Keras 3 with TensorFlow 2.21; the optimizer's
step count says so). A setting that came from elsewhere (``tune``'s ``result.apply(model)``,
which cannot know ``fit``'s arguments) then silently trains more steps than asked. Where the
epoch ends with the data (no ``steps_per_epoch``), Keras stops at the data's end and nothing
is trained twice, so only an explicit ``steps_per_epoch`` is checked.
"""

from __future__ import annotations

import math
import warnings

from tfthroughput.hardware.source import MonitoringWarning


def partial_execution_message(steps_per_epoch: object, steps_per_execution: object) -> str | None:
    """What a ``fit`` with these settings trains instead, or ``None`` when they agree.

    Args:
        steps_per_epoch: ``fit``'s ``steps_per_epoch`` argument (``None`` when not given).
        steps_per_execution: The model's ``steps_per_execution``.

    Returns:
        A sentence for the user, or ``None``.

    Example:
        >>> partial_execution_message(6, 4)[:60]
        'fit(steps_per_epoch=6) with steps_per_execution=4 trains 8 s'
        >>> partial_execution_message(8, 4) is None
        True
    """
    if not isinstance(steps_per_epoch, int) or not isinstance(steps_per_execution, int):
        return None
    if steps_per_execution <= 1 or steps_per_epoch <= 0:
        return None
    if steps_per_epoch % steps_per_execution == 0:
        return None
    trained = math.ceil(steps_per_epoch / steps_per_execution) * steps_per_execution
    return (
        f"fit(steps_per_epoch={steps_per_epoch}) with steps_per_execution="
        f"{steps_per_execution} trains {trained} steps per epoch, not {steps_per_epoch}: Keras "
        "runs whole executions. Make steps_per_epoch a multiple of steps_per_execution (or "
        "compile with a steps_per_execution that divides it)."
    )


def warn_partial_execution(steps_per_epoch: object, steps_per_execution: object) -> None:
    """Warn (:class:`MonitoringWarning`) once for this ``fit`` if its epoch is not a whole
    number of executions (see :func:`partial_execution_message`)."""
    message = partial_execution_message(steps_per_epoch, steps_per_execution)
    if message is not None:
        warnings.warn(message, MonitoringWarning, stacklevel=3)
