"""The demo's comparison of its two runs: a terminal table and TensorBoard's Markdown, with the
speed-up stated as the HTML report states it."""

from __future__ import annotations

from dataclasses import dataclass

from tfthroughput.report.steady_epochs import Speedup, speedup, steady_label


@dataclass(frozen=True)
class RunSummary:
    """One training run of the demo: the median of its epochs after the first (which pays
    tracing and caching), the figures ``tfthroughput report`` compares too.

    Attributes:
        epochs: Epochs trained; which ones the figures are is ``steady_label(epochs)``.
        epoch_examples_per_second: Examples/s of each epoch (the speed-up's range); empty
            where not known.
    """

    name: str
    examples_per_second: float
    epoch_seconds: float
    gpu_utilization_percent: float | None
    cpu_percent: float | None
    epochs: int = 1
    epoch_examples_per_second: tuple[float, ...] = ()


def comparison_table(runs: list[RunSummary]) -> str:
    """The runs side by side, and the last one's speed-up over the first, stated as the HTML
    report states it (:class:`~tfthroughput.report.Speedup`).

    Example:
        >>> print(comparison_table([
        ...     RunSummary("naive", 410.0, 2.93, None, 98.0, epochs=3),
        ...     RunSummary("build_pipeline", 1230.5, 0.98, None, 87.0, epochs=3),
        ... ]))
        pipeline        examples/s  epoch time  GPU util      host CPU
        --------------  ----------  ----------  ------------  --------
        naive           410         2.93 s      n/a (no GPU)  98 %
        build_pipeline  1,230       0.98 s      n/a (no GPU)  87 %
        build_pipeline vs naive: 3.00x examples/s (median of epochs 2-3)
    """

    def percent(value: float | None) -> str:
        return "n/a (no GPU)" if value is None else f"{value:.0f} %"

    rows = [("pipeline", "examples/s", "epoch time", "GPU util", "host CPU")]
    for run in runs:
        rows.append(
            (
                run.name,
                f"{run.examples_per_second:,.0f}",
                f"{run.epoch_seconds:.2f} s",
                percent(run.gpu_utilization_percent),
                "n/a" if run.cpu_percent is None else f"{run.cpu_percent:.0f} %",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(str(_speedup(runs)))
    return "\n".join(lines)


def comparison_markdown(runs: list[RunSummary]) -> str:
    """The comparison as a markdown table, for TensorBoard's Text tab."""
    lines = [
        "| pipeline | examples/s | epoch time | GPU util | host CPU |",
        "|---|---:|---:|---:|---:|",
    ]
    for run in runs:
        gpu = (
            "n/a" if run.gpu_utilization_percent is None else f"{run.gpu_utilization_percent:.0f} %"
        )
        cpu = "n/a" if run.cpu_percent is None else f"{run.cpu_percent:.0f} %"
        lines.append(
            f"| {run.name} | {run.examples_per_second:,.0f} | {run.epoch_seconds:.2f} s | "
            f"{gpu} | {cpu} |"
        )
    figure, words = str(_speedup(runs)).split(" (", 1)  # the figure bold, its words after
    lines += ["", f"**{figure}** ({words}"]
    return "\n".join(lines)


def _speedup(runs: list[RunSummary]) -> Speedup:
    last, first = runs[-1], runs[0]
    if last.epoch_examples_per_second and first.epoch_examples_per_second:
        mine, theirs = last.epoch_examples_per_second, first.epoch_examples_per_second
        return speedup(last.name, first.name, mine, theirs, "examples/s")
    return Speedup(
        run=last.name,
        baseline=first.name,
        ratio=last.examples_per_second / first.examples_per_second,
        unit="examples/s",
        label=steady_label(min(run.epochs for run in runs)),
    )
