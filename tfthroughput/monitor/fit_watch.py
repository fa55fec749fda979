"""Finding the Keras ``fit`` (or ``evaluate``, ``predict``) that drives a callback, and noticing
when it is gone.

Keras 3 calls no callback hook when ``fit`` raises (an exception, Ctrl-C), so a monitor that
waited for ``on_train_end`` would sample and hold its files open until the next ``fit``. The
sampler thread instead checks, before each sample, that the training thread is still inside the
``fit`` it started in: a short walk up that thread's stack.

Nothing here holds that ``fit``'s frame: a frame keeps every local of ``fit`` alive (the
training arrays, the iterator), and after an interrupted ``fit`` nothing else may keep them.
Frames cannot be weakly referenced and their addresses are reused at once (the next ``fit``'s
frame often gets the same ``id``), so a call is recognised by its thread, its code object, its
frame's ``id`` and a weak reference to the object ``fit`` called the hooks through (Keras's
``CallbackList``, made for this call alone and gone as soon as the call is).
"""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from types import CodeType, FrameType


@dataclass(frozen=True)
class FitCall:
    """One running call of Keras's ``fit``, identified without a reference to its frame.

    Attributes:
        thread_id: The thread running it (``threading.get_ident()``).
        code: ``fit``'s code object (shared by every call, so it pins nothing of this one).
        frame_id: ``id()`` of this call's frame, unique only while the frame exists.
        dispatcher: Weak reference to the object whose method ``fit`` called to reach the
            hooks (Keras's ``CallbackList``), or ``None`` if there was none to refer to. While
            it lives, so does this call's frame, so ``frame_id`` cannot have been reused.
    """

    thread_id: int
    code: CodeType
    frame_id: int
    dispatcher: weakref.ReferenceType | None

    def is_running(self) -> bool:
        """Whether the call is still on its thread's stack."""
        if self.dispatcher is not None and self.dispatcher() is None:
            return False  # made for this call and already freed: the call is over
        frame: FrameType | None = sys._current_frames().get(self.thread_id)
        while frame is not None:
            if not isinstance(frame, FrameType):
                # The stack is read while its thread runs on, and a caller link read that way
                # was once not a frame (a SymbolicTensor, during a fit): its AttributeError
                # stopped the sampler. No proof the call is over: the next sample reads again.
                return True
            if frame.f_code is self.code and id(frame) == self.frame_id:
                return True
            frame = frame.f_back
        return False


def find_fit(name: str = "fit") -> FitCall | None:
    """The innermost Keras ``fit`` on the calling thread's stack, or ``None`` (a hand-written
    loop, or hooks driven by other code).

    Args:
        name: The Keras model method to find: ``"fit"``, ``"evaluate"`` or ``"predict"``.
            Defaults to ``"fit"``.

    Example:
        >>> find_fit() is None  # not called from inside model.fit
        True
    """
    found = _fit_frame(sys._getframe(1), name)
    if found is None:
        return None
    frame, callee = found
    return FitCall(threading.get_ident(), frame.f_code, id(frame), _weak_self(callee))


def fit_locals(*names: str, method: str = "fit") -> dict[str, object]:
    """The named locals of the innermost Keras ``fit`` on the calling thread's stack.

    Keras 3 gives callbacks neither the data nor its adapter; ``fit`` holds them in locals
    (``x``, ``epoch_iterator``). They are read once and the frame is let go at once.

    Args:
        *names: Names of ``fit``'s locals to read.
        method: The Keras model method whose locals to read: ``"fit"``, ``"evaluate"`` or
            ``"predict"`` (they hold the same names). Defaults to ``"fit"``.

    Returns:
        ``{name: value}`` for each name ``fit`` has bound; ``{}`` outside ``fit``.

    Example:
        >>> fit_locals("x")  # not called from inside model.fit
        {}
    """
    found = _fit_frame(sys._getframe(1), method)
    if found is None:
        return {}
    values = found[0].f_locals
    del found
    return {name: values[name] for name in names if name in values}


def _fit_frame(
    frame: FrameType | None, name: str = "fit"
) -> tuple[FrameType, FrameType | None] | None:
    """The innermost Keras ``fit`` (or ``name``) frame from ``frame`` up, with the frame it
    called."""
    callee: FrameType | None = None
    while frame is not None:
        if frame.f_code.co_name == name and _is_keras(frame.f_globals.get("__name__", "")):
            return frame, callee
        callee, frame = frame, frame.f_back
    return None


def _is_keras(module_name: str) -> bool:
    return module_name == "keras" or module_name.startswith("keras.")


def _weak_self(frame: FrameType | None) -> weakref.ReferenceType | None:
    """A weak reference to the ``self`` of a method's frame, if it has one that allows it."""
    if frame is None or "self" not in frame.f_code.co_varnames[: frame.f_code.co_argcount]:
        return None
    try:
        return weakref.ref(frame.f_locals["self"])
    except (KeyError, TypeError):
        return None
