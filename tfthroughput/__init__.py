"""tfthroughput: see, fix and diagnose an idle accelerator in TensorFlow/Keras training.

Public names are resolved lazily (PEP 562), so ``import tfthroughput`` imports neither
TensorFlow nor NVML: the sampler core and ``GPUMonitor`` stay usable on machines without
TensorFlow (``GPUMonitor`` under Keras's JAX or PyTorch backend), a name that needs TensorFlow
says so when it is used without it, and a user's GPU is not touched until a monitor actually
starts.
"""

from __future__ import annotations

import importlib
from typing import Any

from tfthroughput._optional import missing_package_error

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "BatchSizeSearch": "tfthroughput.diagnosis.batch_size",
    "BatchSizeTrial": "tfthroughput.diagnosis.batch_size",
    "DataService": "tfthroughput.data.service",
    "DataServiceUnavailable": "tfthroughput.data.dispatcher",
    "DatasetBenchmark": "tfthroughput.data.benchmark",
    "DeviceDescription": "tfthroughput.precision.rules",
    "DiagnosisReport": "tfthroughput.diagnosis.report",
    "DiagnosisThresholds": "tfthroughput.diagnosis.verdict",
    "DipTrigger": "tfthroughput.monitor.dip",
    "GPUConfiguration": "tfthroughput.precision.gpus",
    "GPUMonitor": "tfthroughput.monitor.callback",
    "GPUsAlreadyInitializedError": "tfthroughput.precision.gpus",
    "HostSource": "tfthroughput.hardware.host",
    "JitChange": "tfthroughput.precision.xla",
    "LocalDataService": "tfthroughput.data.service_cluster",
    "MetricStats": "tfthroughput.hardware.stats",
    "MonitoringWarning": "tfthroughput.hardware.source",
    "PipelineDescription": "tfthroughput.data.description",
    "PipelineLint": "tfthroughput.data.lint",
    "PipelineMeasurement": "tfthroughput.data.autotune",
    "PipelineStage": "tfthroughput.data.description",
    "PolicyChange": "tfthroughput.precision.policy",
    "PrecisionRecommendation": "tfthroughput.precision.rules",
    "ProfileSteps": "tfthroughput.monitor.profiling",
    "Recommendation": "tfthroughput.diagnosis.recommendations",
    "Sampler": "tfthroughput.hardware.sampler",
    "StageMeasurement": "tfthroughput.data.autotune",
    "XlaCompilationError": "tfthroughput.precision.xla",
    "benchmark_dataset": "tfthroughput.data.benchmark",
    "build_pipeline": "tfthroughput.data.pipeline",
    "check_mixed_precision_outputs": "tfthroughput.precision.policy",
    "configure_gpus": "tfthroughput.precision.gpus",
    "default_sources": "tfthroughput.hardware.discovery",
    "describe_devices": "tfthroughput.precision.rules",
    "describe_pipeline": "tfthroughput.data.description",
    "diagnose": "tfthroughput.diagnosis.measure",
    "find_batch_size": "tfthroughput.diagnosis.batch_size",
    "jit_compile": "tfthroughput.precision.xla",
    "lint_pipeline": "tfthroughput.data.lint",
    "loss_scale_optimizer": "tfthroughput.precision.optimizers",
    "measure_pipeline": "tfthroughput.data.autotune",
    "mixed_precision": "tfthroughput.precision.policy",
    "recommend_precision": "tfthroughput.precision.rules",
    "with_gradient_accumulation": "tfthroughput.precision.optimizers",
    "xla_auto_clustering": "tfthroughput.precision.xla",
    "xla_compile_kwargs": "tfthroughput.precision.xla",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tfthroughput' has no attribute {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        # Only some names need TensorFlow (see the README's backend table): say which.
        clear = missing_package_error(f"tfthroughput.{name}", error)
        if clear is None:
            raise
        raise clear from error
    value = getattr(module, name)
    globals()[name] = value  # resolve once; later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
