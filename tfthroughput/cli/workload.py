"""``tfthroughput tune MODULE:FUNCTION``: find the function and read what it returns.

The contract: ``FUNCTION`` takes no arguments and returns either a dict of
:func:`tfthroughput.tune`'s arguments, with at least ``build_model`` and ``data`` (and, for
arrays or an unbatched dataset, ``batch_size``; ``callbacks``, ``precision`` and ``strategy``
may be given too), or a tuple ``(build_model, data)`` or ``(build_model, data, batch_size)``.
``MODULE`` is an importable module name (``my_project.train``) or the path of a Python file
(``train.py``); the current folder is searched first. With ``--inference``, ``data``
is what ``predict`` takes (inputs only) and ``build_model`` may return an uncompiled model.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

# Arguments of tune the workload function may set; the command line sets the others.
WORKLOAD_KEYS = frozenset(
    {"build_model", "data", "batch_size", "callbacks", "precision", "strategy"}
)


def load_workload(spec: str) -> dict[str, Any]:
    """Import ``MODULE:FUNCTION``, call the function and check what it returns.

    Returns:
        tune's keyword arguments, with ``build_model`` and ``data``.

    Raises:
        ValueError: If ``spec`` is not ``MODULE:FUNCTION`` or the function is missing.
        TypeError: If the function returns something else than the contract says.
    """
    module_name, _, function_name = spec.rpartition(":")
    if not module_name or not function_name.isidentifier():
        raise ValueError(
            "`workload` must be MODULE:FUNCTION, e.g. train.py:tune_inputs or "
            f"my_project.train:tune_inputs. Received: workload={spec!r}"
        )
    module = _import(module_name)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ValueError(
            f"`workload` names no function {function_name!r} in {module_name!r}. "
            f"Received: workload={spec!r}"
        )
    returned = function()
    if isinstance(returned, tuple) and len(returned) in (2, 3):
        returned = dict(zip(("build_model", "data", "batch_size"), returned, strict=False))
    if not isinstance(returned, dict) or not {"build_model", "data"} <= set(returned):
        raise TypeError(
            f"{spec} must return a dict with 'build_model' and 'data' (and 'batch_size' for "
            "arrays), or a tuple (build_model, data[, batch_size]). Received: "
            f"{_described(returned)}"
        )
    unknown = sorted(set(returned) - WORKLOAD_KEYS)
    if unknown:
        raise TypeError(
            f"{spec} returned keys tune does not take from a workload: {unknown}; allowed: "
            f"{sorted(WORKLOAD_KEYS)}"
        )
    return returned


def inference_arguments(inference: bool, max_batch_latency_ms: float | None) -> dict[str, Any]:
    """tune's arguments for ``--inference`` and ``--max-batch-latency-ms``.

    Raises:
        ValueError: If a latency limit is given without ``--inference``.
    """
    if not inference:
        if max_batch_latency_ms is not None:
            raise ValueError("--max-batch-latency-ms applies to --inference only")
        return {}
    return {"mode": "inference", "max_batch_latency_ms": max_batch_latency_ms}


def _import(module_name: str) -> Any:
    if module_name.endswith(".py") or os.sep in module_name:
        if not os.path.isfile(module_name):
            raise ValueError(f"`workload` file {module_name!r} does not exist")
        name = os.path.splitext(os.path.basename(module_name))[0]
        spec = importlib.util.spec_from_file_location(name, module_name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(module_name)


def _described(value: Any) -> str:
    """What a workload function returned, by type and keys: never the user's values (a dict of
    arrays would print them)."""
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} ({', '.join(type(v).__name__ for v in value)})"
    return f"a {type(value).__name__}"
