"""Lazy public names (PEP 562) for the package and each subpackage's face.

A face lists its public names and the module that defines each; a name is imported on first
use. So ``import tfthroughput.data`` imports no TensorFlow, ``import tfthroughput`` touches no
GPU, and a name that needs a missing TensorFlow or Keras says which package to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from tfthroughput._optional import missing_package_error


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` that resolve ``exports`` on first use.

    Args:
        package: The face's module name, as users spell it (e.g. ``"tfthroughput.data"``).
        namespace: The face's ``globals()``; a resolved name is stored there, so later look-ups
            skip ``__getattr__``.
        exports: Public name -> the module that defines it.

    Returns:
        ``(__getattr__, __dir__)`` for the face to assign at module level.

    Example:
        >>> getattr_, dir_ = lazy_exports("demo", {}, {"sqrt": "math"})
        >>> getattr_("sqrt")(9.0)
        3.0
    """

    def __getattr__(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            # Only some names need TensorFlow (see the docs' backend table): say which.
            clear = missing_package_error(f"{package}.{name}", error)
            if clear is None:
                raise
            raise clear from error
        value = getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
