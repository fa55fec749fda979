"""A ready-made TensorBoard Custom Scalars layout for the monitor's tags.

TensorBoard's Scalars tab shows one chart per tag; the layout written here adds a "Custom
Scalars" dashboard that puts every GPU on one chart per metric, next to throughput.
"""

from __future__ import annotations

from tensorboard.plugins.custom_scalar import layout_pb2

from tfthroughput.hardware.metrics import GPU_METRICS, HOST_METRICS


def hardware_layout() -> layout_pb2.Layout:
    """The layout: GPU metrics (all GPUs per chart), host metrics, and epoch throughput."""

    def chart(title: str, regex: str) -> layout_pb2.Chart:
        return layout_pb2.Chart(
            title=title, multiline=layout_pb2.MultilineChartContent(tag=[regex])
        )

    gpu = layout_pb2.Category(
        title="tfthroughput: GPUs (mean and p95 per epoch)",
        chart=[
            chart(f"{metric.name} [{metric.unit}]", rf"^gpu\d+/{metric.name}/(mean|p95)$")
            for metric in GPU_METRICS
        ],
    )
    host = layout_pb2.Category(
        title="tfthroughput: host (mean and p95 per epoch)",
        chart=[
            chart(f"{metric.name} [{metric.unit}]", rf"^host/{metric.name}/(mean|p95)$")
            for metric in HOST_METRICS
        ],
    )
    throughput = layout_pb2.Category(
        title="tfthroughput: throughput per epoch",
        chart=[
            chart("steps per second", r"^epoch/steps_per_second$"),
            chart("examples per second", r"^epoch/examples_per_second$"),
            chart("epoch wall time [s]", r"^epoch/seconds$"),
        ],
    )
    return layout_pb2.Layout(category=[throughput, gpu, host])


def write_layout(writer) -> None:
    """Write the layout through a ``tf.summary`` writer (once per run is enough)."""
    import tensorflow as tf
    from tensorboard.plugins.custom_scalar import summary as custom_scalar_summary

    with writer.as_default():
        tf.summary.experimental.write_raw_pb(
            custom_scalar_summary.pb(hardware_layout()).SerializeToString(), step=0
        )
