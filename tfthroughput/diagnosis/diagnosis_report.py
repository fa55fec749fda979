"""What :func:`tfthroughput.diagnose` found, and how it is shown (terminal, markdown, TensorBoard).

The report is a frozen dataclass of measurements; the verdict and the recommendations are
computed once by ``diagnose`` (rules in :mod:`tfthroughput.diagnosis.verdict` and
:mod:`tfthroughput.diagnosis.recommendations`) and stored, so a report prints the same
everywhere.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass

from tfthroughput.diagnosis.recommendations import Recommendation
from tfthroughput.diagnosis.verdict import (
    BALANCED,
    COMPUTE_BOUND,
    INPUT_BOUND,
    LAUNCH_OVERHEAD_BOUND,
    DiagnosisThresholds,
    per,
)
from tfthroughput.hardware.cpu_share import CpuShare

# What a report measured: a training run (fit) or batch inference (predict).
TRAINING = "training"
INFERENCE = "inference"
_STEP = {TRAINING: "training step", INFERENCE: "predict step"}
_CALL = {TRAINING: "fit", INFERENCE: "predict"}

_VERDICT_MEANING = {
    INPUT_BOUND: "the {step} waits on the input pipeline",
    COMPUTE_BOUND: "the {step} itself is the bottleneck; the input pipeline keeps up",
    BALANCED: "some of each step waits on input, the rest is compute",
    LAUNCH_OVERHEAD_BOUND: (
        "each step is so short that fixed per-step costs (Python, dispatch, kernel launches) "
        "dominate"
    ),
}

# TensorBoard tags written by DiagnosisReport.write_to_tensorboard, with their units. Text
# only: each figure would be a chart of a single point, so the numbers stay in the report's
# table, where they are read side by side.
TENSORBOARD_TAGS = {
    "diagnosis/report": "text: the markdown report (measurements, verdict, recommendations)",
}
# Width of the detail lines under each recommendation in the terminal text.
_DETAIL_WIDTH = 96


@dataclass(frozen=True)
class DiagnosisReport:
    """What :func:`tfthroughput.diagnose` measured and concluded.

    Attributes:
        batch_size: Examples per batch (leading dimension of the dataset's first batch).
        steps: Batches or training steps timed per repeat.
        repeats: Timed repeats of each measurement (the median is kept).
        input_batches_per_second: (a) The input pipeline alone, iterated as ``fit`` would.
        compute_batches_per_second: (b) ``fit`` on a few batches cached in memory: the
            compute-only limit.
        fit_batches_per_second: (c) ``fit`` on the dataset itself: input and compute together.
        input_bound_fraction: Share of the end-to-end step time spent waiting on input,
            ``max(0, 1 - fit_batches_per_second / compute_batches_per_second)``, i.e.
            ``(t_fit - t_compute) / t_fit`` with ``t`` the seconds per step.
        verdict: ``"input-bound"``, ``"compute-bound"``, ``"balanced"`` or
            ``"launch-overhead-bound"``, decided by ``thresholds``.
        recommendations: What to change, most important first.
        gpu_utilization_percent: Mean GPU utilization (0..100) during (c), or ``None`` when
            not measured.
        thresholds: The :class:`DiagnosisThresholds` the verdict used.
        sm_activity_percent: Mean GPM SM activity (0..100) during (c), or ``None`` when not
            measured (GPM exists on Hopper and newer). Far below ``gpu_utilization_percent``,
            it means tiny kernels: GPU-Util counts the time any kernel runs, however few SMs
            it keeps busy.
        mode: ``"training"`` (``diagnose``: ``fit``) or ``"inference"``
            (``diagnose(..., mode="inference")``: (b) and (c) are ``predict``, and
            ``fit_batches_per_second`` is ``predict`` on the dataset).
        input_cpu: The cores this process used and other programs took while (a) ran (a
            :class:`~tfthroughput.hardware.cpu_share.CpuShare`), or ``None`` when not
            measured. Where other programs took half a core or more, the advice says so: the
            input figure is then what this process got, not what the pipeline can do.
    """

    batch_size: int
    steps: int
    repeats: int
    input_batches_per_second: float
    compute_batches_per_second: float
    fit_batches_per_second: float
    input_bound_fraction: float
    verdict: str
    recommendations: tuple[Recommendation, ...]
    gpu_utilization_percent: float | None = None
    thresholds: DiagnosisThresholds = DiagnosisThresholds()
    sm_activity_percent: float | None = None
    mode: str = TRAINING
    input_cpu: CpuShare | None = None

    @property
    def input_examples_per_second(self) -> float:
        """Examples per second the input pipeline alone delivers."""
        return self.input_batches_per_second * self.batch_size

    @property
    def compute_examples_per_second(self) -> float:
        """Examples per second the training step alone processes."""
        return self.compute_batches_per_second * self.batch_size

    @property
    def fit_examples_per_second(self) -> float:
        """Examples per second ``fit`` reaches end to end."""
        return self.fit_batches_per_second * self.batch_size

    @property
    def compute_step_seconds(self) -> float:
        """Seconds per compute-only training step."""
        return per(self.compute_batches_per_second)

    @property
    def fit_step_seconds(self) -> float:
        """Seconds per end-to-end training step."""
        return per(self.fit_batches_per_second)

    @property
    def _title(self) -> str:
        return "inference diagnosis" if self.mode == INFERENCE else "diagnosis"

    def _rows(self) -> list[tuple[str, str, str, str]]:
        return [
            (
                "(a) input pipeline alone",
                f"{self.input_batches_per_second:,.1f}",
                f"{self.input_examples_per_second:,.0f}",
                f"{per(self.input_batches_per_second) * 1000:,.2f}",
            ),
            (
                f"(b) {_STEP[self.mode]} alone",
                f"{self.compute_batches_per_second:,.1f}",
                f"{self.compute_examples_per_second:,.0f}",
                f"{self.compute_step_seconds * 1000:,.2f}",
            ),
            (
                f"(c) {_CALL[self.mode]}, both together",
                f"{self.fit_batches_per_second:,.1f}",
                f"{self.fit_examples_per_second:,.0f}",
                f"{self.fit_step_seconds * 1000:,.2f}",
            ),
        ]

    def _summary_lines(self) -> list[str]:
        gpu = (
            "not measured"
            if self.gpu_utilization_percent is None
            else f"{self.gpu_utilization_percent:.0f}% during (c)"
        )
        if self.sm_activity_percent is not None:
            gpu += f", SM activity {self.sm_activity_percent:.1f}%"
        return [
            f"Verdict: {self.verdict} "
            f"({_VERDICT_MEANING.get(self.verdict, '').format(step=_STEP[self.mode])})",
            f"Input-bound fraction: {self.input_bound_fraction:.0%} of each "
            f"{_CALL[self.mode]} step waits on input",
            f"GPU utilization: {gpu}",
        ]

    def __str__(self) -> str:
        header = ("measurement", "batches/s", "examples/s", "ms/batch")
        rows = [header, *self._rows()]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]

        def line(row: tuple[str, ...]) -> str:
            cells = [row[0].ljust(widths[0])] + [
                cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)
            ]
            return "  ".join(cells).rstrip()

        lines = [
            f"tfthroughput {self._title} (batch size {self.batch_size}, "
            f"median of {self.repeats} x {self.steps} steps)",
            line(header),
            line(tuple("-" * w for w in widths)),
            *(line(row) for row in rows[1:]),
            "",
            *self._summary_lines(),
        ]
        if self.recommendations:
            lines += ["", "Recommendations (the action, then why):"]
            for number, recommendation in enumerate(self.recommendations, 1):
                lines.append(f"  {number}. {recommendation.action}")
                lines += textwrap.wrap(
                    recommendation.reason,
                    _DETAIL_WIDTH,
                    initial_indent="     ",
                    subsequent_indent="     ",
                    break_on_hyphens=False,
                )
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The report as GitHub-flavoured markdown (also what TensorBoard's text tab shows)."""
        lines = [
            f"**tfthroughput {self._title}** (batch size {self.batch_size}, median of "
            f"{self.repeats} x {self.steps} steps)",
            "",
            "| measurement | batches/s | examples/s | ms/batch |",
            "|---|---:|---:|---:|",
            *(f"| {' | '.join(row)} |" for row in self._rows()),
            "",
            *(f"- {text}" for text in self._summary_lines()),
        ]
        if self.recommendations:
            lines += ["", "**Recommendations** (the action, then why)", ""]
            for number, recommendation in enumerate(self.recommendations, 1):
                # The detail is the item's second paragraph (indented 4): its own line.
                lines += [
                    f"{number}. `{recommendation.action}`",
                    "",
                    f"    {recommendation.reason}",
                ]
                lines.append("")
            lines.pop()  # no blank line after the last item
        return "\n".join(lines)

    def write_to_tensorboard(self, log_dir: str, *, step: int = 0) -> None:
        """Write the report to a TensorBoard log folder, as text.

        The markdown report goes to the Text tab under ``diagnosis/report``. Its figures are
        not written as scalars: each would be a chart of one point.

        Args:
            log_dir: Folder for the event file (created if missing), e.g. the ``log_dir`` of
                ``keras.callbacks.TensorBoard``.
            step: The step to write at. Defaults to ``0``.

        Raises:
            TypeError: If ``log_dir`` is not a string/path or ``step`` not an int.
        """
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"`log_dir` must be a folder path. Received: log_dir={log_dir!r}")
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"`step` must be an int. Received: step={step!r}")
        from tfthroughput.monitor.text_entries import write_text

        write_text(log_dir, {"diagnosis/report": self.to_markdown()}, step=step)
