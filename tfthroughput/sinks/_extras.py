"""The optional packages behind the sinks: one check, and the one-line install hint."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# Module -> (the sink that needs it, the extra that installs it).
_EXTRAS = {
    "mlflow": ("MLflowSink", "mlflow"),
    "prometheus_client": ("PrometheusSink", "prometheus"),
}


def missing(module: str) -> bool:
    """Whether ``module`` cannot be imported (tests switch a package off with
    ``sys.modules[module] = None``)."""
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # ValueError: blocked (None in sys.modules)
        return True


def install_hint(module: str) -> ImportError:
    """The ``ImportError`` saying which sink needs ``module`` and how to install it."""
    sink, extra = _EXTRAS[module]
    return ImportError(
        f'{sink} needs {module}, which is not installed: pip install "tfthroughput[{extra}]"',
        name=module,
    )


def require(module: str) -> ModuleType:
    """Import ``module``, or raise :func:`install_hint`'s error.

    Raises:
        ImportError: If ``module`` is not installed.
    """
    if missing(module):
        raise install_hint(module)
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise install_hint(module) from error
