"""NVML access for the whole process: imported lazily, initialised once, errors translated.

NVML keeps a reference count per ``nvmlInit``; initialising per query (or per monitor) is a
known source of overhead, so this module initialises at most once per process and never shuts
NVML down while the process may still sample.
"""

from __future__ import annotations

import os
import threading
from types import ModuleType

# Tests and users can switch NVML off entirely (e.g. to check host-only behaviour on a GPU box).
DISABLE_ENV_VAR = "TFTHROUGHPUT_DISABLE_NVML"

_lock = threading.Lock()
_initialised = False
_failure: str | None = None


class NVMLUnavailable(RuntimeError):
    """NVML cannot be used in this process; the message says why and what to check."""


def _explain(error: BaseException, pynvml: ModuleType | None) -> str:
    if pynvml is None:
        return (
            f"the `pynvml` module is missing: install it with `pip install nvidia-ml-py` ({error})"
        )
    code = getattr(error, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return (
            "the NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed "
            "here, or its library directory is not on the loader path"
        )
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return (
            "the NVIDIA driver is not loaded: check that `nvidia-smi` works, and that a "
            "container was started with GPU access"
        )
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "NVML refused access (no permission to the GPU device files)"
    return f"NVML failed to initialise: {error}"


def nvml() -> ModuleType:
    """Return the initialised ``pynvml`` module.

    Raises:
        NVMLUnavailable: With a user-facing explanation, if NVML cannot be used. The outcome
            is remembered, so a failing process pays for the attempt once.
    """
    global _initialised, _failure
    with _lock:
        if _failure is not None:
            raise NVMLUnavailable(_failure)
        if os.environ.get(DISABLE_ENV_VAR):
            raise NVMLUnavailable(f"NVML is switched off by {DISABLE_ENV_VAR}")
        try:
            import pynvml
        except ImportError as error:
            _failure = _explain(error, None)
            raise NVMLUnavailable(_failure) from error
        if not _initialised:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as error:
                _failure = _explain(error, pynvml)
                raise NVMLUnavailable(_failure) from error
            _initialised = True
        return pynvml
