"""The public surface of `tfthroughput` is explicit, sorted, and cheap to import."""

from __future__ import annotations

import subprocess
import sys

import tfthroughput

EXPECTED_PUBLIC_NAMES = [
    "BatchSizeSearch",
    "BatchSizeTrial",
    "DataService",
    "DataServiceUnavailable",
    "DatasetBenchmark",
    "DeviceDescription",
    "DiagnosisReport",
    "DiagnosisThresholds",
    "GPUConfiguration",
    "GPUMonitor",
    "GPUsAlreadyInitializedError",
    "HostSource",
    "JitChange",
    "LocalDataService",
    "MetricStats",
    "MonitoringWarning",
    "PipelineDescription",
    "PipelineLint",
    "PipelineMeasurement",
    "PipelineStage",
    "PolicyChange",
    "PrecisionRecommendation",
    "ProfileSteps",
    "Recommendation",
    "Sampler",
    "StageMeasurement",
    "XlaCompilationError",
    "benchmark_dataset",
    "build_pipeline",
    "check_mixed_precision_outputs",
    "configure_gpus",
    "default_sources",
    "describe_devices",
    "describe_pipeline",
    "diagnose",
    "find_batch_size",
    "jit_compile",
    "lint_pipeline",
    "loss_scale_optimizer",
    "measure_pipeline",
    "mixed_precision",
    "recommend_precision",
    "with_gradient_accumulation",
    "xla_auto_clustering",
    "xla_compile_kwargs",
]


def test_all_is_pinned_and_sorted():
    assert tfthroughput.__all__ == EXPECTED_PUBLIC_NAMES
    assert tfthroughput.__all__ == sorted(tfthroughput.__all__)


def test_every_public_name_resolves():
    for name in tfthroughput.__all__:
        assert getattr(tfthroughput, name) is not None, name


def test_unknown_attribute_raises_attribute_error():
    try:
        tfthroughput.not_a_real_name  # noqa: B018
    except AttributeError as error:
        assert "not_a_real_name" in str(error)
    else:
        raise AssertionError("expected AttributeError")


def test_import_touches_neither_tensorflow_nor_nvml():
    code = (
        "import sys, tfthroughput; "
        "print('tensorflow' in sys.modules, 'keras' in sys.modules, 'pynvml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]
