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
    "BatchSizeSearch": "tfthroughput.batch_size",
    "BatchSizeTrial": "tfthroughput.batch_size",
    "DatasetBenchmark": "tfthroughput.benchmark",
    "DeviceDescription": "tfthroughput.precision",
    "DiagnosisReport": "tfthroughput.report",
    "DiagnosisThresholds": "tfthroughput.report",
    "GPUConfiguration": "tfthroughput.gpus",
    "GPUMonitor": "tfthroughput.monitor",
    "GPUsAlreadyInitializedError": "tfthroughput.gpus",
    "HostSource": "tfthroughput.sources",
    "JitChange": "tfthroughput.xla",
    "MetricStats": "tfthroughput.stats",
    "MonitoringWarning": "tfthroughput.sources",
    "PipelineDescription": "tfthroughput.pipeline_description",
    "PipelineStage": "tfthroughput.pipeline_description",
    "PolicyChange": "tfthroughput.precision",
    "PrecisionRecommendation": "tfthroughput.precision",
    "Recommendation": "tfthroughput.report",
    "Sampler": "tfthroughput.sampler",
    "XlaCompilationError": "tfthroughput.xla",
    "benchmark_dataset": "tfthroughput.benchmark",
    "build_pipeline": "tfthroughput.pipeline",
    "check_mixed_precision_outputs": "tfthroughput.precision",
    "configure_gpus": "tfthroughput.gpus",
    "default_sources": "tfthroughput.sources",
    "describe_devices": "tfthroughput.precision",
    "describe_pipeline": "tfthroughput.pipeline_description",
    "diagnose": "tfthroughput.diagnosis",
    "find_batch_size": "tfthroughput.batch_size",
    "jit_compile": "tfthroughput.xla",
    "loss_scale_optimizer": "tfthroughput.precision",
    "mixed_precision": "tfthroughput.precision",
    "recommend_precision": "tfthroughput.precision",
    "with_gradient_accumulation": "tfthroughput.precision",
    "xla_auto_clustering": "tfthroughput.xla",
    "xla_compile_kwargs": "tfthroughput.xla",
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
