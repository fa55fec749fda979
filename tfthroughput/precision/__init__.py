"""Fixing the arithmetic: precision policy, XLA and GPU set-up, chosen for the hardware, with
scoped helpers that restore what was there before.
"""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "DeviceDescription": "tfthroughput.precision.precision_recommendation",
    "GPUConfiguration": "tfthroughput.precision.gpu_configuration",
    "GPUsAlreadyInitializedError": "tfthroughput.precision.gpu_configuration",
    "JitChange": "tfthroughput.precision.xla",
    "PolicyChange": "tfthroughput.precision.policy",
    "PrecisionRecommendation": "tfthroughput.precision.precision_recommendation",
    "XlaCompilationError": "tfthroughput.precision.xla",
    "check_mixed_precision_outputs": "tfthroughput.precision.policy",
    "configure_gpus": "tfthroughput.precision.gpu_configuration",
    "describe_devices": "tfthroughput.precision.precision_recommendation",
    "jit_compile": "tfthroughput.precision.xla",
    "loss_scale_optimizer": "tfthroughput.precision.optimizers",
    "mixed_precision": "tfthroughput.precision.policy",
    "recommend_precision": "tfthroughput.precision.precision_recommendation",
    "with_gradient_accumulation": "tfthroughput.precision.optimizers",
    "xla_auto_clustering": "tfthroughput.precision.xla",
    "xla_compile_kwargs": "tfthroughput.precision.xla",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
