"""tfthroughput: see, fix and diagnose an idle accelerator in TensorFlow/Keras training.

Public names are resolved lazily (PEP 562), so ``import tfthroughput`` imports neither
TensorFlow nor NVML: the sampler core stays usable on machines without TensorFlow, and a
user's GPU is not touched until a monitor actually starts.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "DatasetBenchmark": "tfthroughput.benchmark",
    "PipelineDescription": "tfthroughput.pipeline_description",
    "PipelineStage": "tfthroughput.pipeline_description",
    "benchmark_dataset": "tfthroughput.benchmark",
    "build_pipeline": "tfthroughput.pipeline",
    "describe_pipeline": "tfthroughput.pipeline_description",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tfthroughput' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # resolve once; later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
