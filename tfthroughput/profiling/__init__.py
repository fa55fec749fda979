"""Profiler traces from Keras training: `ProfileSteps` (chosen steps) and `DipTrigger` (when
utilization dips), both shown in TensorBoard's Profile tab.
"""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "DipTrigger": "tfthroughput.profiling.dip_trigger",
    "ProfileSteps": "tfthroughput.profiling.profile_steps",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
