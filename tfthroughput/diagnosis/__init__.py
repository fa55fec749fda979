"""Knowing the bottleneck: `diagnose` (input-only, compute-only and end-to-end throughput, a
verdict and what to change) and `find_batch_size`.
"""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "BatchSizeSearch": "tfthroughput.diagnosis.batch_size",
    "BatchSizeTrial": "tfthroughput.diagnosis.batch_size",
    "DiagnosisReport": "tfthroughput.diagnosis.diagnosis_report",
    "DiagnosisThresholds": "tfthroughput.diagnosis.verdict",
    "Recommendation": "tfthroughput.diagnosis.recommendations",
    "diagnose": "tfthroughput.diagnosis.training_diagnosis",
    "find_batch_size": "tfthroughput.diagnosis.batch_size",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
