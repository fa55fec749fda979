"""tfthroughput: see, fix and diagnose an idle accelerator in TensorFlow/Keras training.

The top level holds what a user types; result and configuration types live in each
subpackage's face (``tfthroughput.data.PipelineLint``, ``tfthroughput.diagnosis.DiagnosisReport``,
...). Names resolve lazily (PEP 562), so ``import tfthroughput`` imports neither TensorFlow nor
NVML: ``GPUMonitor`` stays usable without TensorFlow (under Keras's JAX or PyTorch backend), a
name that needs TensorFlow says so when it is used without it, and a user's GPU is not touched
until a monitor actually starts.
"""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "DataService": "tfthroughput.data.service",
    "DipTrigger": "tfthroughput.profiling.dip_trigger",
    "GPUMonitor": "tfthroughput.monitor.gpu_monitor",
    "autolog": "tfthroughput.monitor.autologging",
    "autotune": "tfthroughput.tuning.script.autotuning",
    "MonitoringWarning": "tfthroughput.hardware.source",
    "ProfileSteps": "tfthroughput.profiling.profile_steps",
    "benchmark_dataset": "tfthroughput.data.benchmark",
    "build_pipeline": "tfthroughput.data.pipeline",
    "configure_gpus": "tfthroughput.precision.gpu_configuration",
    "describe_pipeline": "tfthroughput.data.description",
    "diagnose": "tfthroughput.diagnosis.training_diagnosis",
    "find_batch_size": "tfthroughput.diagnosis.batch_size",
    "jit_compile": "tfthroughput.precision.xla",
    "lint_pipeline": "tfthroughput.data.lint",
    "mixed_precision": "tfthroughput.precision.policy",
    "recommend_precision": "tfthroughput.precision.precision_recommendation",
    "tune": "tfthroughput.tuning.tuner",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
