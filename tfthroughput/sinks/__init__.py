"""Where the monitor's figures go besides TensorBoard: MLflow, Prometheus, or your own sink.

``GPUMonitor(sinks=[...])`` hands each window's and each epoch's figures to every sink
(``docs/sinks.md``). Importing this face imports neither MLflow nor ``prometheus_client``.
"""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "MLflowSink": "tfthroughput.sinks.mlflow_sink",
    "Measurement": "tfthroughput.sinks.sink",
    "PrometheusSink": "tfthroughput.sinks.prometheus_sink",
    "RunInfo": "tfthroughput.sinks.sink",
    "Sink": "tfthroughput.sinks.sink",
    "log_report": "tfthroughput.sinks.mlflow_sink",
    "mlflow_metric_name": "tfthroughput.sinks.mlflow_sink",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
