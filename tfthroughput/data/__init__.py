"""Fixing the input: `tf.data` pipeline building, checks, description and measurement, and the
tf.data service.
"""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "DataService": "tfthroughput.data.service",
    "DataServiceUnavailable": "tfthroughput.data.dispatcher",
    "DatasetBenchmark": "tfthroughput.data.benchmark",
    "DeviceAugmented": "tfthroughput.data.device_augmented",
    "LocalDataService": "tfthroughput.data.service_cluster",
    "PipelineDescription": "tfthroughput.data.description",
    "PipelineLint": "tfthroughput.data.lint",
    "PipelineMeasurement": "tfthroughput.data.autotune",
    "PipelineStage": "tfthroughput.data.description",
    "StageMeasurement": "tfthroughput.data.autotune",
    "benchmark_dataset": "tfthroughput.data.benchmark",
    "build_pipeline": "tfthroughput.data.pipeline",
    "describe_pipeline": "tfthroughput.data.description",
    "lint_pipeline": "tfthroughput.data.lint",
    "measure_pipeline": "tfthroughput.data.autotune",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
