"""A ready-made TensorBoard Custom Scalars layout for the monitor's tags.

TensorBoard's Scalars tab shows one chart per tag; the layout written here adds a "Custom
Scalars" dashboard that puts every GPU on one chart per metric, next to throughput.
"""

from __future__ import annotations

from tensorboard.compat.proto import summary_pb2, types_pb2
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as custom_scalar_metadata

from tfthroughput.hardware.metrics import GPU_METRICS, HOST_METRICS


def hardware_layout() -> layout_pb2.Layout:
    """The layout: epoch throughput, GPU metrics (all GPUs per chart), GPU-Util against SM
    activity, and host metrics."""

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
    # GPU-Util beside what the SMs did: tiny kernels keep the first high and the second low.
    activity = layout_pb2.Category(
        title="tfthroughput: GPU-Util against SM activity (mean per epoch)",
        chart=[
            chart(
                "GPU-Util, SM activity and busy-but-idle [%]",
                r"^gpu\d+/(utilization_percent/mean|sm_activity_percent/mean"
                r"|busy_but_idle_percent)$",
            )
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
    return layout_pb2.Layout(category=[throughput, gpu, activity, host])


def layout_summary() -> summary_pb2.Summary:
    """The layout as the summary TensorBoard's Custom Scalars plugin reads (its ``pb``), built
    without TensorFlow: a string tensor holding the serialized layout."""
    value = summary_pb2.Summary.Value(
        tag=custom_scalar_metadata.CONFIG_SUMMARY_TAG,
        metadata=custom_scalar_metadata.create_summary_metadata(),
    )
    value.tensor.dtype = types_pb2.DT_STRING
    value.tensor.tensor_shape.SetInParent()  # rank 0: present and empty
    value.tensor.string_val.append(hardware_layout().SerializeToString())
    return summary_pb2.Summary(value=[value])
