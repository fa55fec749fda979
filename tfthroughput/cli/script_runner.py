"""Run a user's script or module as ``__main__`` in this process, as ``python SCRIPT`` and
``python -m MODULE`` would, for ``tfthroughput run``.

Modelled on coverage's ``PyRunner``: a real module object is ``sys.modules["__main__"]`` (and
``__mp_main__``, so ``multiprocessing``'s spawn and pickling find classes and functions the
script defines), ``sys.argv``, ``sys.path[0]`` and ``__file__`` are what Python sets, a module
that cannot be found is told apart from an ``ImportError`` raised inside it, and the script's
own ending (an exception, ``sys.exit(n)``, Ctrl-C) comes back as an :class:`Ending` instead of
leaving this process, so the runner can print its summary first.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass


class ScriptNotFound(Exception):
    """The script or module named on the command line does not exist (exit status 2)."""


@dataclass(frozen=True)
class Ending:
    """How the script ended.

    Attributes:
        exit_code: What ``python SCRIPT`` exits with: 0, ``n`` of ``sys.exit(n)``, 1 after
            an uncaught exception, 130 after Ctrl-C.
        error: The uncaught exception (``KeyboardInterrupt`` included), or None.
        message: What ``sys.exit("text")`` prints, or None.
    """

    exit_code: int
    error: BaseException | None = None
    message: str | None = None

    @property
    def interrupted(self) -> bool:
        return isinstance(self.error, KeyboardInterrupt)


@dataclass(frozen=True)
class Target:
    """What to run: its code, and the ``__main__`` attributes and argv Python would give it."""

    code: types.CodeType
    argv0: str
    path0: str
    attributes: dict


def script_target(path: str) -> Target:
    """``python PATH``: ``sys.argv[0]`` as given; ``__file__`` and the code's file name
    absolute (as Python 3.9+ makes them); the script's folder first on the path."""
    if not os.path.isfile(path):
        raise ScriptNotFound(f"SCRIPT: no such file: {path!r}")
    with open(path, "rb") as file:
        source = file.read()
    absolute = os.path.abspath(path)
    code = compile(source, absolute, "exec", dont_inherit=True)
    loader = importlib.machinery.SourceFileLoader("__main__", absolute)
    attributes = {"__file__": absolute, "__loader__": loader, "__spec__": None, "__package__": None}
    return Target(code, path, os.path.dirname(absolute), attributes)


def module_target(name: str) -> Target:
    """``python -m NAME``: a package runs its ``__main__``; the working folder is first on the
    path (so the module is found there, as Python finds it)."""
    sys.path.insert(0, os.getcwd())
    try:
        spec = _find(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = _find(f"{name}.__main__")
    finally:
        del sys.path[0]
    if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
        raise ScriptNotFound(f"-m: no module named {name!r}")
    code = spec.loader.get_code(spec.name)
    if code is None:
        raise ScriptNotFound(f"-m: {name!r} has no code to run")
    attributes = {
        "__file__": spec.origin,
        "__loader__": spec.loader,
        "__spec__": spec,
        "__package__": spec.parent,
    }
    return Target(code, spec.origin or name, os.getcwd(), attributes)


def _find(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent package that does not exist
        return None


def run_target(target: Target, args: list[str]) -> Ending:
    """Run ``target`` as ``__main__`` with ``args``; returns how it ended."""
    main = types.ModuleType("__main__")
    main.__dict__.update(target.attributes, __builtins__=__builtins__)
    # Left in place afterwards, as Python leaves it: atexit handlers and pools may still need it.
    sys.modules["__main__"] = sys.modules["__mp_main__"] = main
    sys.argv = [target.argv0, *args]
    sys.path[0] = target.path0
    try:
        exec(target.code, main.__dict__)
    except SystemExit as exit_:
        return _system_exit(exit_)
    except BaseException as error:  # the script's own: reported as Python reports it
        return Ending(130 if isinstance(error, KeyboardInterrupt) else 1, error)
    return Ending(0)


def _system_exit(exit_: SystemExit) -> Ending:
    code = exit_.code
    if code is None:
        return Ending(0)
    if isinstance(code, int):
        return Ending(code & 0xFF if code >= 0 else code % 256)
    return Ending(1, message=str(code))


def print_traceback(error: BaseException) -> None:
    """Print ``error`` as Python would at exit, without the runner's frames: this module's,
    and autolog's patch between the script and Keras."""
    from tfthroughput.monitor import keras_patch

    hidden = {__file__, keras_patch.__file__}
    kept = []
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename not in hidden:
            kept.append(traceback)
        traceback = traceback.tb_next
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    # Python's hook prints the exception's own traceback, whatever it is given.
    sys.excepthook(type(error), error.with_traceback(rebuilt), rebuilt)
