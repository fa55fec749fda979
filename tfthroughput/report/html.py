"""A :class:`~tfthroughput.report.run_comparison.RunComparison` as one self-contained HTML file.

The page opens with what a reader wants first: each run's verdict and the speed-up (stated as
the demo's terminal states it), then the table, the charts and each diagnosis rendered from its
markdown. Charts are drawn with matplotlib (the ``report`` extra) without pyplot, so no global
state or display is touched, and embedded as base64 PNG: the file opens offline and can be
mailed. Percentages are drawn on a 0-100 axis, so a flat, saturated line reads as saturated.
"""

from __future__ import annotations

import base64
import html
import io
import os
import re

from tfthroughput._optional import missing_package_error
from tfthroughput.report.run_comparison import QUANTITIES, Quantity, RunComparison, compare_runs

REPORT_FILE_NAME = "report.html"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
figure { display: inline-block; margin: 0.5em; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; white-space: pre-wrap; }
.absent { color: #777; }
.verdict { font-size: 1.15em; }
.speedup { font-size: 1.3em; font-weight: bold; }
.diagnosis { border-left: 4px solid #ddd; padding-left: 1em; }
"""
# The verdict line of a diagnosis's markdown (DiagnosisReport.to_markdown).
_VERDICT_LINE = re.compile(r"^- Verdict: (.+)$", re.M)


def require_matplotlib():
    """matplotlib's ``Figure`` class, or an ImportError that says which line installs it."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        clear = missing_package_error("tfthroughput report", error)
        if clear is None:
            raise
        raise clear from error
    return Figure


def render_html(comparison: RunComparison) -> str:
    """The whole report page: verdicts and speed-up, the table of medians, the runs, per-epoch
    charts and each run's diagnosis.

    Args:
        comparison: What :func:`~tfthroughput.report.run_comparison.compare_runs` read.

    Returns:
        The page, one HTML document with its charts embedded as base64 PNG.

    Raises:
        ImportError: If matplotlib is not installed.
    """
    figure_class = require_matplotlib()
    title = f"tfthroughput report: {comparison.log_dir}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        _verdict_section(comparison),
        _table_section(comparison),
        _runs_section(comparison),
        "<h2>Per epoch</h2>",
        "<p>Each point is one epoch's mean over the monitor's samples (x: the epoch, "
        "TensorBoard's step, counted from 0); percentages on a 0-100 axis.</p>",
    ]
    for quantity in QUANTITIES:
        if quantity.plotted:
            parts.append(_chart(figure_class, comparison, quantity))
    parts.append(_diagnosis_section(comparison))
    parts.append(_tuning_section(comparison))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_html(comparison: RunComparison, output: str | os.PathLike | None = None) -> str:
    """Write the report page for ``comparison``.

    Args:
        comparison: What :func:`~tfthroughput.report.run_comparison.compare_runs` read.
        output: The file to write. Defaults to ``<log_dir>/report.html``.

    Returns:
        The path written.

    Raises:
        ImportError: If matplotlib is not installed.
        OSError: If the file cannot be written.
    """
    path = os.fspath(output) if output is not None else None
    path = path or os.path.join(comparison.log_dir, REPORT_FILE_NAME)
    page = render_html(comparison)
    with open(path, "w", encoding="utf-8") as file:
        file.write(page)
    return path


def write_report(log_dir: str | os.PathLike, output: str | os.PathLike | None = None) -> str:
    """Compare the ``GPUMonitor`` runs under ``log_dir`` into one HTML file; returns its path.

    Args:
        log_dir: A TensorBoard log folder holding one or more ``GPUMonitor`` runs.
        output: Where to write the page. Defaults to ``<log_dir>/report.html``.

    Raises:
        ImportError: If matplotlib is not installed (checked before anything is read).
        FileNotFoundError, NotADirectoryError, ValueError: See
            :func:`~tfthroughput.report.run_comparison.compare_runs`.
        OSError: If the file cannot be written.

    Example:
        >>> write_report("logs/tfthroughput-demo")  # doctest: +SKIP
        'logs/tfthroughput-demo/report.html'
    """
    require_matplotlib()
    return write_html(compare_runs(log_dir), output)


def _e(text: object) -> str:
    return html.escape(str(text))


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _cell(value: float | None, text: str | None = None) -> str:
    if value is None:
        return '<td class="number">n/a</td>'
    return f'<td class="number" data-value="{value!r}">{_e(text or _number(value))}</td>'


def _verdict_section(comparison: RunComparison) -> str:
    """What the page says first: each diagnosed run's verdict, and each run's speed-up."""
    parts = ['<h2 id="verdict">Verdict</h2>']
    for run in comparison.runs:
        found = _VERDICT_LINE.search(run.diagnosis or "")
        if found:
            parts.append(f'<p class="verdict"><b>{_e(run.name)}</b>: {_e(found.group(1))}</p>')
    for speedup in comparison.speedups():
        parts.append(f'<p class="speedup">{_e(speedup)}</p>')
    if len(parts) == 1:
        parts.append(
            '<p class="absent">No diagnosis was written and there is one run only: the table '
            "and the charts below say what was measured.</p>"
        )
    return "\n".join(parts)


def _runs_section(comparison: RunComparison) -> str:
    items = []
    for run in comparison.runs:
        items.append(
            f"<li><b>{_e(run.name)}</b>: {run.epochs} epoch(s), <code>{_e(run.path)}</code></li>"
        )
    return (
        "<h2>Runs</h2><p>In the order they were first written; the first is the baseline.</p>"
        f"<ol>{''.join(items)}</ol>"
    )


def _table_section(comparison: RunComparison) -> str:
    runs = comparison.runs
    baseline = runs[0].name
    head = ["quantity", "unit", *(run.name for run in runs)]
    head += [f"{run.name} / {baseline}" for run in runs[1:]]
    lines = [
        "<h2>Medians over epochs</h2>",
        f"<p>Each run's {_e(comparison.label)} (the first epoch, with tracing and warm-up, is "
        "left out when there are two or more), and for throughput and time its ratio to the "
        "first run's. Percentages and memory are compared side by side, not by ratio.</p>",
        '<table id="medians"><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>",
    ]
    for row in comparison.rows:
        label = row.quantity.title + (f" ({row.source})" if row.source.startswith("gpu") else "")
        cells = [
            f'<td data-tag="{_e(row.tag)}">{_e(label)}</td>',
            f"<td>{_e(row.quantity.unit)}</td>",
        ]
        cells += [_cell(median) for median in row.medians]
        if row.quantity.compared_by_ratio:
            cells += [
                _cell(ratio, f"{ratio:.2f}x" if ratio is not None else None)
                for ratio in row.ratios[1:]
            ]
        else:
            cells += ['<td class="absent">-</td>' for _ in row.ratios[1:]]
        lines.append("<tr>" + "".join(cells) + "</tr>")
    lines.append("</table>")
    return "\n".join(lines)


def _chart(figure_class, comparison: RunComparison, quantity: Quantity) -> str:
    lines = comparison.series(quantity)
    heading = f"<h3>{_e(quantity.title)} [{_e(quantity.unit)}]</h3>"
    if not lines:
        return f'{heading}<p class="absent">Not recorded in any run: {_e(quantity.absent)}.</p>'
    several_sources = len({source for _, source, _ in lines}) > 1
    figure = figure_class(figsize=(7.0, 3.2), layout="constrained")
    axes = figure.add_subplot()
    for run, source, points in lines:
        label = f"{run.name} ({source})" if several_sources else run.name
        steps, values = [step for step, _ in points], [value for _, value in points]
        # Not clipped: a line at 100 % on a 0-100 axis is drawn over the frame, not hidden.
        axes.plot(steps, values, "o-", label=label, clip_on=False)
    axes.set_xlabel("epoch")
    axes.set_ylabel(quantity.unit)
    limits = axis_range(quantity.unit, [value for _, _, points in lines for _, value in points])
    if limits is not None:
        axes.set_ylim(*limits)
    axes.xaxis.get_major_locator().set_params(integer=True)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=96)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    alt = f"{quantity.title} per epoch, one line per run"
    return f'{heading}<figure><img alt="{_e(alt)}" src="data:image/png;base64,{encoded}"></figure>'


def axis_range(unit: str, values: list[float]) -> tuple[float, float] | None:
    """The y-axis of a chart: 0-100 for percentages (further up only if a value is above 100,
    as a process's CPU can be); ``None`` lets matplotlib fit the values.

    Example:
        >>> axis_range("%", [99.4, 100.0]), axis_range("%", [150.0]), axis_range("s", [1.0])
        ((0.0, 100.0), (0.0, 157.5), None)
    """
    if unit != "%":
        return None
    top = max(values, default=0.0)
    return 0.0, 100.0 if top <= 100.0 else top * 1.05


def _diagnosis_section(comparison: RunComparison) -> str:
    parts = ["<h2>Diagnosis</h2>"]
    for run in comparison.runs:
        parts.append(f"<h3>{_e(run.name)}</h3>")
        if run.diagnosis is None:
            parts.append(
                '<p class="absent">No diagnosis written (<code>DiagnosisReport.'
                "write_to_tensorboard</code> into this run's folder adds one).</p>"
            )
        else:
            parts.append(f'<div class="diagnosis">{markdown_html(run.diagnosis)}</div>')
    return "\n".join(parts)


def markdown_html(text: str) -> str:
    """A diagnosis's markdown as HTML, tables included; any HTML inside it is shown as text.

    Uses Python-Markdown, which TensorBoard depends on (its Text tab renders the same text).

    Example:
        >>> print(markdown_html("**input-bound** <b>x</b>"))
        <p><strong>input-bound</strong> &lt;b&gt;x&lt;/b&gt;</p>
    """
    import markdown

    converter = markdown.Markdown(extensions=["tables"])
    # Raw HTML in the text is data, not markup: escape it instead of passing it through.
    converter.preprocessors.deregister("html_block")
    converter.inlinePatterns.deregister("html")
    return converter.convert(text)


def _tuning_section(comparison: RunComparison) -> str:
    if not comparison.tunings:
        return ""
    parts = ["<h2>Tuning</h2>", "<p>What <code>tfthroughput.tune</code> measured and chose.</p>"]
    for folder, table in comparison.tunings:
        parts.append(f"<h3>{_e(folder)}</h3><pre>{_e(table)}</pre>")
    return "\n".join(parts)
