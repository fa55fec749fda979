"""Seeing it in Keras: the `GPUMonitor` callback and what it writes for TensorBoard, and
`autolog`, which gives every `fit`, `evaluate` and `predict` one."""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "GPUMonitor": "tfthroughput.monitor.gpu_monitor",
    "MonitoredCall": "tfthroughput.monitor.autologging",
    "autolog": "tfthroughput.monitor.autologging",
    "monitored_calls": "tfthroughput.monitor.autologging",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
