"""Tuning: try the throughput fixes on the user's own model, keep the math, apply the winner.

``tune`` is resolved lazily (PEP 562), with its result types, so importing this face imports
neither Keras nor TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "LossCheck": "tfthroughput.tuning.loss_check",
    "TuneResult": "tfthroughput.tuning.result",
    "TuneSetup": "tfthroughput.tuning.setup",
    "TuneTrial": "tfthroughput.tuning.result",
    "tune": "tfthroughput.tuning.tuner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tfthroughput.tuning' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
