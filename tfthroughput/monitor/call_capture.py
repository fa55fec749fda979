"""Take one ``fit`` (or ``predict``) call of a running script, for ``tfthroughput tune SCRIPT``.

It rides on autolog's patch of ``keras.Model`` (:func:`keras_patch.set_call_hook`), so there is
one way of intercepting Keras's methods. At the chosen call, before Keras trains anything, it
keeps the model, the call's arguments, the compile arguments and a copy of the weights as they
are then (the initial weights the script would train from), and hands them to ``on_call``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfthroughput.monitor import keras_patch


@dataclass
class CapturedCall:
    """One call of the script's, as it was about to run.

    Attributes:
        kind: ``"fit"`` or ``"predict"``.
        model: The script's own model (never trained nor changed by the capture).
        arguments: The call's arguments by name (``x``, ``y``, ``batch_size``, ...), as bound
            to the method's signature; the call runs with these, changed or not.
        compile_arguments: What the model was compiled with (``optimizer``, ``loss``, ...).
        weights: The model's weights at the call, as arrays; ``None`` before it is built.
        site: Where the script made the call (``train.py:42``), where the taker notes it.
    """

    kind: str
    model: Any
    arguments: dict[str, Any]
    compile_arguments: dict[str, Any] = field(default_factory=dict)
    weights: list | None = None
    site: str | None = None


class CaptureStopsTheScript(BaseException):
    """Raised from the script's call to end the script there (a ``BaseException``, so the
    script's own ``except Exception`` does not catch it)."""


def capture(kind: str, number: int, on_call: Callable[[CapturedCall], None]) -> None:
    """From now on, give the ``number``-th call of ``kind`` the script makes to ``on_call``
    (which may change ``arguments`` in place, or raise :class:`CaptureStopsTheScript`).

    The patch must be installed (``keras_patch.patch``); :func:`keras_patch.unpatch` ends it.
    """
    seen = 0

    def hook(name: str, model: Any, bound: inspect.BoundArguments) -> None:
        nonlocal seen
        if name != kind:
            return
        seen += 1
        if seen == number:
            captured = _captured(kind, model, bound)
            on_call(captured)
            for name, value in captured.arguments.items():  # what on_call changed, if anything
                if name in bound.signature.parameters:
                    bound.arguments[name] = value

    keras_patch.set_call_hook(hook)


def _captured(kind: str, model: Any, bound: inspect.BoundArguments) -> CapturedCall:
    compile_config = getattr(model, "_compile_config", None)
    compile_arguments = dict(compile_config.config) if compile_config is not None else {}
    weights = [w.copy() for w in model.get_weights()] if model.built else None
    arguments = {name: value for name, value in bound.arguments.items() if name != "self"}
    arguments.update(arguments.pop("kwargs", {}))
    return CapturedCall(kind, model, arguments, compile_arguments, weights)
