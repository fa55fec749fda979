"""The patch of ``keras.Model.fit``, ``evaluate`` and ``predict`` that autolog installs.

Keras 3's real methods are the backend trainer's (``TensorFlowTrainer.fit``,
``JAXTrainer.fit``), inherited by ``keras.Model``; the patch is set on ``keras.Model`` itself,
so it reaches every model, and removing it lets the inherited method show through again (a
method ``keras.Model`` defined itself is put back as the same object). Each call the user
makes asks a ``monitor_for(kind, callbacks, model)`` function for a monitor and runs the
original with a copy of the callbacks, the monitor first (or unchanged where it gives none).
Faults of that preparation become one ``MonitoringWarning`` per method and the original runs
with the user's own arguments; the original's errors are never caught.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
from collections.abc import Callable

from tfthroughput.hardware.source import MonitoringWarning

METHODS = ("fit", "evaluate", "predict")
_MARK = "_tfthroughput_autolog_original"
_MISSING = object()

# What keras.Model held before the patch: the method object, or _MISSING where inherited.
_originals: dict[str, object] = {}
_monitor_for: Callable[[str, list, object], object] | None = None
# Calls made inside a monitored call (fit's own validation evaluate, a subclass's fit calling
# super().fit, a callback's predict) are part of that call's measurement.
_inside = threading.local()
_warned: set[str] = set()
# One more hook on the same patch, for ``tfthroughput tune SCRIPT``: called with each call the
# user makes (kind, model, bound arguments) before its monitor is asked for; it may change the
# arguments in place or raise to stop the script. Calls it makes itself run unpatched.
_call_hook: Callable[[str, object, inspect.BoundArguments], None] | None = None


def patch(monitor_for: Callable[[str, list, object], object]) -> None:
    """Install the patch (once; a second call only replaces ``monitor_for``)."""
    global _monitor_for
    import keras

    _monitor_for = monitor_for
    for name in METHODS:
        current = keras.Model.__dict__.get(name, _MISSING)
        if getattr(current, _MARK, None) is not None:
            continue
        _originals[name] = current
        setattr(keras.Model, name, _patched(name, getattr(keras.Model, name)))


def set_call_hook(hook: Callable[[str, object, inspect.BoundArguments], None] | None) -> None:
    """Give every call the user makes to ``hook`` first (None: none); see ``_call_hook``."""
    global _call_hook
    _call_hook = hook


def unpatch() -> None:
    """Restore ``keras.Model`` exactly as it was before :func:`patch`."""
    global _monitor_for, _call_hook
    _call_hook = None
    import keras

    for name, original in list(_originals.items()):
        if original is _MISSING:
            if name in keras.Model.__dict__:
                delattr(keras.Model, name)
        else:
            setattr(keras.Model, name, original)
        del _originals[name]
    _monitor_for = None
    _warned.clear()


def monitor_factory() -> Callable[[str, list], object] | None:
    """The ``monitor_for`` the patch was installed with (None when not patched)."""
    return _monitor_for


def is_patched() -> bool:
    """Whether ``keras.Model``'s methods are patched now."""
    import keras

    return any(getattr(keras.Model.__dict__.get(n), _MARK, None) for n in METHODS)


def _patched(name: str, original: Callable) -> Callable:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        if getattr(_inside, "depth", 0):
            return original(self, *args, **kwargs)
        if _call_hook is not None:
            args, kwargs = _through_hook(name, signature, self, args, kwargs)
        try:
            prepared = _with_monitor(name, signature, self, args, kwargs)
        except Exception as error:  # the patch's own fault: say so once, run the user's call
            prepared = None
            if name not in _warned:
                _warned.add(name)
                warnings.warn(
                    f"tfthroughput.autolog could not add a GPUMonitor to {name} "
                    f"({type(error).__name__}: {error}); the call runs unmonitored.",
                    MonitoringWarning,
                    stacklevel=2,
                )
        if prepared is None:
            return original(self, *args, **kwargs)
        _inside.depth = getattr(_inside, "depth", 0) + 1
        try:
            return original(*prepared.args, **prepared.kwargs)
        finally:
            _inside.depth -= 1

    setattr(call, _MARK, original)
    return call


def _through_hook(name, signature, model, args, kwargs) -> tuple[tuple, dict]:
    """The call's arguments after the hook saw (and maybe changed) them; its errors propagate."""
    hook = _call_hook
    try:
        bound = signature.bind(model, *args, **kwargs)
    except TypeError:  # the user's own mistake: Keras says it, unchanged
        return args, kwargs
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        hook(name, model, bound)
    finally:
        _inside.depth -= 1
    return bound.args[1:], bound.kwargs


def _with_monitor(name, signature, model, args, kwargs) -> inspect.BoundArguments | None:
    """The arguments of a call the user made: with the monitor ``monitor_for`` gives first in
    a copy of its callbacks, or as they were where it gives none. None for a call Keras makes
    itself (``fit``'s validation), which is left as it is."""
    monitor_for = _monitor_for
    if monitor_for is None or kwargs.get("_use_cached_eval_dataset"):
        return None
    try:
        bound = signature.bind(model, *args, **kwargs)
    except TypeError:  # the user's own mistake: Keras says it, unchanged
        return None
    callbacks = bound.arguments.get("callbacks")
    if callbacks is None:
        callbacks = []
    elif not isinstance(callbacks, (list, tuple)):  # a CallbackList Keras built: not the user's
        return None
    monitor = monitor_for(name, list(callbacks), model)
    if monitor is not None:
        bound.arguments["callbacks"] = [monitor, *callbacks]
    return bound
