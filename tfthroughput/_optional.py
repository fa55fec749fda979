"""TensorFlow and Keras are optional: the clear error when a feature needs one that is missing.

``GPUMonitor`` and the sampler core need no TensorFlow (Keras 3 on JAX or PyTorch will do);
the ``tf.data`` tools, ``diagnose``, ``find_batch_size``, ``ProfileSteps`` and the GPU and XLA
set-up do. Without it they raise an ``ImportError`` that names the feature, the missing package
and how to install it, instead of a bare "No module named 'tensorflow'".
"""

from __future__ import annotations

from types import ModuleType

# Top-level module -> (what to call it, how to install it).
_PACKAGES = {
    "tensorflow": ("TensorFlow", 'pip install "tfthroughput[tensorflow]"'),
    "keras": ("Keras 3", 'pip install keras (or "tfthroughput[tensorflow]", which ships it)'),
}


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
        `tfthroughput.diagnose` needs TensorFlow, which is not installed: pip install ...
    """
    module = (getattr(error, "name", None) or "").partition(".")[0]
    if module not in _PACKAGES:
        return None
    package, install = _PACKAGES[module]
    return ImportError(
        f"`{feature}` needs {package}, which is not installed: {install}. GPUMonitor and the "
        "sampler (Sampler, default_sources) need no TensorFlow and run under Keras's JAX and "
        "PyTorch backends; the README's backend table lists what needs what.",
        name=module,
    )


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
