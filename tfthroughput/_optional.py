"""TensorFlow and Keras are optional: the clear error when a feature needs one that is missing.

``GPUMonitor`` and the sampler core need no TensorFlow (Keras 3 on JAX or PyTorch will do);
the ``tf.data`` tools, ``diagnose``, ``find_batch_size``, ``ProfileSteps`` and the GPU and XLA
set-up do. Without it they raise an ``ImportError`` that names the feature, the missing package
and how to install it, instead of a bare "No module named 'tensorflow'".
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from types import ModuleType

# Top-level module -> (what to call it, the extra that installs it).
_PACKAGES = {
    "tensorflow": ("TensorFlow", "tensorflow"),
    "keras": ("Keras 3", "tensorflow"),
    "matplotlib": ("matplotlib", "report"),
}


def install_command(extra: str) -> str:
    """The one line that installs ``extra`` into the environment this code runs in.

    From a clone (the package imported from a source tree with ``setup.cfg`` beside it), the
    clone itself is installed with the extra, with this interpreter's pip; otherwise the
    package index's ``tfthroughput[extra]``.

    Args:
        extra: The extra's name in setup.cfg, e.g. ``"report"``.

    Returns:
        A shell command, quoted so it pastes as is.

    Example:
        >>> command = install_command("report")  # from a clone: "<python> -m pip install -e ..."
        >>> " install " in command and command.endswith("[report]'")
        True
    """
    root = Path(__file__).resolve().parents[1]
    if (root / "setup.cfg").is_file() and (root / "tfthroughput").is_dir():
        python = shlex.quote(sys.executable)
        return f"{python} -m pip install -e {shlex.quote(f'{root}[{extra}]')}"
    return f"pip install {shlex.quote(f'tfthroughput[{extra}]')}"


def missing_package_error(feature: str, error: ImportError) -> ImportError | None:
    """The clear error for ``feature`` if ``error`` says TensorFlow or Keras is not installed.

    Args:
        feature: What needed it, as the user wrote it (e.g. ``"tfthroughput.diagnose"``).
        error: The ``ImportError`` raised while importing what ``feature`` needs.

    Returns:
        An ``ImportError`` naming ``feature``, the package and how to install it (its ``name``
        is the package's module), or ``None`` when ``error`` is about some other module.

    Example:
        >>> error = ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
        >>> print(missing_package_error("tfthroughput.diagnose", error))  # doctest: +ELLIPSIS
        `tfthroughput.diagnose` needs TensorFlow, which is not installed: ... install ...
    """
    module = (getattr(error, "name", None) or "").partition(".")[0]
    if module not in _PACKAGES:
        return None
    package, extra = _PACKAGES[module]
    message = f"`{feature}` needs {package}, which is not installed: {install_command(extra)}"
    if extra == "tensorflow":
        message += (
            ". GPUMonitor and the sampler need no TensorFlow and run under Keras's JAX and "
            "PyTorch backends (KERAS_BACKEND=jax); docs/backends.md lists what needs what."
        )
    return ImportError(message, name=module)


def import_tensorflow(feature: str) -> ModuleType:
    """``import tensorflow``, or the clear ``ImportError`` saying ``feature`` needs it.

    Raises:
        ImportError: If TensorFlow is not installed.
    """
    try:
        import tensorflow
    except ImportError as error:
        clear = missing_package_error(feature, error)
        if clear is None:
            raise
        raise clear from error
    return tensorflow
