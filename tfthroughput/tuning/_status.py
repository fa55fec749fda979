"""The statuses a trial of :func:`tfthroughput.tune` can end with, as shown in its table."""

from __future__ import annotations

BASELINE = "baseline"
FASTER = "faster"
NOT_FASTER = "within noise"
SLOWER = "slower"
FAILED = "failed"
REJECTED = "loss diverges"
PROBE = "probe"
# Inference only (tune(..., mode="inference")).
OUTPUTS_DIFFER = "outputs differ"
OVER_LATENCY = "over latency limit"
