"""Where the monitor's figures go besides TensorBoard: MLflow, Prometheus, or your own sink.

``GPUMonitor(sinks=[...])`` hands each window's and each epoch's figures to every sink; see
``docs/sinks.md``.
"""

from __future__ import annotations

from tfthroughput.sinks.mlflow_sink import MLflowSink, log_report, mlflow_metric_name
from tfthroughput.sinks.prometheus_sink import PrometheusSink
from tfthroughput.sinks.sink import Measurement, RunInfo, Sink

__all__ = [
    "MLflowSink",
    "Measurement",
    "PrometheusSink",
    "RunInfo",
    "Sink",
    "log_report",
    "mlflow_metric_name",
]
