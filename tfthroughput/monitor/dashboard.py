"""The TensorBoard Custom Scalars layout for the monitor's tags, made from what a run measures.

TensorBoard's Scalars tab shows one chart per tag; the layout adds a "Custom Scalars" dashboard
that puts every GPU on one chart per metric, next to throughput. It lists only the sources and
metrics the run has (no GPU charts on a machine without one), so the monitor writes it once
the first window or epoch has shown what exists, and again if more appears later.

Its first row answers "is the accelerator busy, and how fast is training?": GPU utilization,
SM activity where the GPUs report it, and examples/s (steps/s without ``batch_size``; host CPU
when there is no GPU), and the share of the time spent waiting for batches
(``input/wait_percent``, where it is measured), per window when the monitor cuts windows, else
per epoch.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tensorboard.compat.proto import summary_pb2, types_pb2
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as custom_scalar_metadata

from tfthroughput.hardware.activity import BUSY_BUT_IDLE, SM_ACTIVITY, UTILIZATION
from tfthroughput.hardware.metrics import ALL_METRICS
from tfthroughput.hardware.sampler import SampleKey

_UNITS = {metric.name: metric.unit for metric in ALL_METRICS}
_ORDER = {metric.name: position for position, metric in enumerate(ALL_METRICS)}
_GPU_SOURCE = r"gpu\d+"
_GLANCE_GPU_CHARTS = (
    ("utilization_percent", "GPU utilization"),
    ("sm_activity_percent", "SM activity"),
)
# Tag prefix of the per-window scalars (see tfthroughput.monitor.events).
WINDOW_PREFIX = "window/"
# Tag prefix of an epoch's validation (see tfthroughput.monitor.epoch_parts).
VALIDATION_PREFIX = "validation/"
# The chart of `input/wait_percent` (tfthroughput.monitor.input_wait).
WAIT_CHART = "waiting for input [%]"


def hardware_layout(
    keys: Iterable[SampleKey],
    *,
    totals: Iterable[SampleKey] = (),
    statistics: Sequence[str] = ("mean", "min", "max", "p95"),
    examples: bool = False,
    windows: bool = False,
    validation: bool = False,
    phase: str | None = None,
    wait: bool = False,
) -> layout_pb2.Layout:
    """The layout for a run that measured ``keys``.

    Args:
        keys: The ``(source, metric)`` pairs the run has statistics for.
        totals: The pairs it adds up per window instead (energy), logged without a statistic.
        statistics: The statistics the monitor logs; charts show the mean and p95 among them.
        examples: Whether ``examples_per_second`` is logged (the monitor was given
            ``batch_size``).
        windows: Whether the monitor writes windows inside epochs (``window/...`` tags, x-axis
            the training step).
        validation: Whether the run validates (``validation/...`` tags, per epoch): adds a
            validation category after the training throughput.
        phase: ``None`` for a ``fit``; ``"evaluate"`` or ``"predict"`` for the run of such
            calls, whose tags all start with ``<phase>/`` (windows with ``<phase>/window/``,
            x-axis the batches of such calls so far) and whose per-epoch charts are per call.
        wait: Whether ``input/wait_percent`` is measured: charted in the first row (and in
            the validation's).

    Returns:
        Categories: "at a glance" first; then, with windows, GPUs (with GPU-Util against SM
        activity where SM activity is read) and host per window; then throughput, GPUs and host
        per epoch. A source family with no metric gets no category.
    """
    totals = set(totals)
    families = _families(set(keys) | totals)
    gpu_metrics = families.get("GPUs", ("", []))[1]
    host_metrics = families.get("host", ("", []))[1]
    shown = [name for name in ("mean", "p95") if name in statistics] or [statistics[0]]
    first = "mean" if "mean" in statistics else statistics[0]
    names = _Names.of(phase, windows)
    per_source = functools.partial(
        _source_categories, families, {key.metric for key in totals}, shown, first, names.name
    )
    categories = [_glance_category(names, gpu_metrics, host_metrics, first, examples, wait)]
    if windows:
        categories += per_source(names.prefix, names.per)
    categories.append(_throughput_category(phase, examples))
    if validation and phase is None:
        categories.append(_validation_category(gpu_metrics, host_metrics, first, examples, wait))
    categories += per_source(names.base, f"per {names.unit}")
    return layout_pb2.Layout(category=categories)


@dataclass(frozen=True)
class _Names:
    """The words and tag prefixes of one layout: a ``fit``'s, or the run of ``evaluate`` or
    ``predict`` calls (``phase``), with or without windows."""

    base: str  # the prefix of the per-epoch (per-call) tags
    unit: str  # what one point is: an epoch, or a call
    name: str  # the phase in category titles
    prefix: str  # the prefix of the tags the first row shows
    per: str  # what one point of the first row is
    figures: str  # the prefix of the first row's throughput figures

    @classmethod
    def of(cls, phase: str | None, windows: bool) -> _Names:
        base = "" if phase is None else f"{phase}/"
        unit = "epoch" if phase is None else "call"
        step = "training step" if phase is None else f"{phase} batch"
        prefix = f"{base}{WINDOW_PREFIX}" if windows else base
        return cls(
            base=base,
            unit=unit,
            name="" if phase is None else f"{phase} ",
            prefix=prefix,
            per=f"per window, x: {step}" if windows else f"per {unit}",
            figures=prefix.rstrip("/") if windows or phase is not None else "epoch",
        )


def _families(keys: set[SampleKey]) -> dict[str, tuple[str, list[str]]]:
    """Every GPU shares its charts; any other source has its own: title -> (tag pattern of
    its sources, its metrics in the metrics' documented order)."""
    ordered = sorted(keys, key=lambda key: (_ORDER.get(key.metric, len(_ORDER)), key))
    families: dict[str, tuple[str, list[str]]] = {}
    for key in ordered:
        gpu = re.fullmatch(_GPU_SOURCE, key.source) is not None
        title, pattern = ("GPUs", _GPU_SOURCE) if gpu else (key.source, re.escape(key.source))
        metrics = families.setdefault(title, (pattern, []))[1]
        if key.metric not in metrics:
            metrics.append(key.metric)
    return families


def _glance_category(
    names: _Names,
    gpu_metrics: Sequence[str],
    host_metrics: Sequence[str],
    first: str,
    examples: bool,
    wait: bool,
) -> layout_pb2.Category:
    """The first row: is the accelerator busy, and how fast is training?"""
    prefix, figures = names.prefix, names.figures
    glance = [
        _chart(f"{title} [%]", rf"^{prefix}gpu\d+/{metric}/{first}$")
        for metric, title in _GLANCE_GPU_CHARTS
        if metric in gpu_metrics
    ]
    if examples:
        glance.append(_chart("examples per second", rf"^{figures}/examples_per_second$"))
    else:
        glance.append(_chart("steps per second", rf"^{figures}/steps_per_second$"))
    if not gpu_metrics and "cpu_percent" in host_metrics:
        glance.append(_chart("host CPU [%]", rf"^{prefix}host/cpu_percent/{first}$"))
    if wait:  # beside GPU-Util, why the device idles: the share of time waiting for batches
        glance.append(_chart(WAIT_CHART, rf"^{prefix}input/wait_percent$"))
    return _category(f"tfthroughput: {names.name}at a glance ({names.per})", glance)


def _source_categories(
    families: dict[str, tuple[str, list[str]]],
    total_metrics: set[str],
    shown: Sequence[str],
    first: str,
    name: str,
    prefix: str,
    per: str,
) -> list[layout_pb2.Category]:
    """A category per source family (its statistics, or totals, under ``prefix``), and GPU-Util
    against SM activity where both are read."""
    stats = "|".join(shown)
    categories = []
    for title, (pattern, metrics) in families.items():
        charts = [
            _chart(
                _titled(metric),
                rf"^{prefix}{pattern}/{metric}$"
                if metric in total_metrics
                else rf"^{prefix}{pattern}/{metric}/({stats})$",
            )
            for metric in metrics
        ]
        categories.append(
            _category(f"tfthroughput: {name}{title} ({' and '.join(shown)}, {per})", charts)
        )
        if title == "GPUs" and SM_ACTIVITY in metrics and UTILIZATION in metrics:
            # GPU-Util beside what the SMs did: tiny kernels keep the first high and the
            # second low (tfthroughput.hardware.activity).
            regex = (
                rf"^{prefix}{pattern}/({UTILIZATION}/{first}|{SM_ACTIVITY}/{first}"
                rf"|{BUSY_BUT_IDLE})$"
            )
            chart = _chart("GPU-Util, SM activity and busy-but-idle [%]", regex)
            categories.append(
                _category(f"tfthroughput: {name}GPU-Util against SM activity ({per})", [chart])
            )
    return categories


def _throughput_category(phase: str | None, examples: bool) -> layout_pb2.Category:
    """Throughput per epoch (per call): steps/s, examples/s, and the time it took."""
    of = "epoch/" if phase is None else f"{phase}/"
    throughput = [_chart("steps per second", rf"^{of}steps_per_second$")]
    if examples:
        throughput.append(_chart("examples per second", rf"^{of}examples_per_second$"))
    if phase is None:
        throughput.append(_chart("training time [s]", r"^epoch/seconds$"))
        throughput.append(
            _chart("epoch wall time, validation included [s]", r"^epoch/wall_seconds$")
        )
        return _category("tfthroughput: training throughput per epoch", throughput)
    throughput.append(_chart(f"{phase} wall time [s]", rf"^{of}seconds$"))
    return _category(f"tfthroughput: {phase} throughput per call", throughput)


def _validation_category(
    gpu_metrics: Sequence[str], host_metrics: Sequence[str], first: str, examples: bool, wait: bool
) -> layout_pb2.Category:
    """The validation inside ``fit``, per epoch: its pace and what the hardware did meanwhile."""
    figure = "examples_per_second" if examples else "steps_per_second"
    charts = [
        _chart(figure.replace("_", " "), rf"^{VALIDATION_PREFIX}{figure}$"),
        _chart("validation time [s]", rf"^{VALIDATION_PREFIX}seconds$"),
    ]
    for metric, title in _GLANCE_GPU_CHARTS:
        if metric in gpu_metrics:
            charts.append(_chart(f"{title} [%]", rf"^{VALIDATION_PREFIX}gpu\d+/{metric}/{first}$"))
    if "cpu_percent" in host_metrics:
        charts.append(_chart("host CPU [%]", rf"^{VALIDATION_PREFIX}host/cpu_percent/{first}$"))
    if wait:
        charts.append(_chart(WAIT_CHART, rf"^{VALIDATION_PREFIX}input/wait_percent$"))
    return _category("tfthroughput: validation (per epoch)", charts)


def layout_summary(layout: layout_pb2.Layout) -> summary_pb2.Summary:
    """The layout as the summary TensorBoard's Custom Scalars plugin reads (its ``pb``), built
    without TensorFlow: a string tensor holding the serialized layout."""
    value = summary_pb2.Summary.Value(
        tag=custom_scalar_metadata.CONFIG_SUMMARY_TAG,
        metadata=custom_scalar_metadata.create_summary_metadata(),
    )
    value.tensor.dtype = types_pb2.DT_STRING
    value.tensor.tensor_shape.SetInParent()  # rank 0: present and empty
    value.tensor.string_val.append(layout.SerializeToString())
    return summary_pb2.Summary(value=[value])


def _titled(metric: str) -> str:
    unit = _UNITS.get(metric)
    return f"{metric} [{unit}]" if unit else metric


def _chart(title: str, regex: str) -> layout_pb2.Chart:
    return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=[regex]))


def _category(title: str, charts: list[layout_pb2.Chart]) -> layout_pb2.Category:
    return layout_pb2.Category(title=title, chart=charts)
