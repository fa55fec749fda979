"""What :func:`tfthroughput.diagnose` found, and how it is shown (terminal, markdown, TensorBoard).

The report is a frozen dataclass of measurements; the verdict and the recommendations are
computed once by ``diagnose`` and stored, so a report prints the same everywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

INPUT_BOUND = "input-bound"
COMPUTE_BOUND = "compute-bound"
BALANCED = "balanced"
LAUNCH_OVERHEAD_BOUND = "launch-overhead-bound"
VERDICTS = (INPUT_BOUND, COMPUTE_BOUND, BALANCED, LAUNCH_OVERHEAD_BOUND)

_VERDICT_MEANING = {
    INPUT_BOUND: "the training step waits on the input pipeline",
    COMPUTE_BOUND: "the training step itself is the bottleneck; the input pipeline keeps up",
    BALANCED: "some of each step waits on input, the rest is compute",
    LAUNCH_OVERHEAD_BOUND: (
        "each step is so short that fixed per-step costs (Python, dispatch, kernel launches) "
        "dominate"
    ),
}

# TensorBoard tags written by DiagnosisReport.write_to_tensorboard, with their units.
TENSORBOARD_TAGS = {
    "diagnosis/report": "text: the markdown report",
    "diagnosis/input_batches_per_second": "batches/s, input pipeline alone",
    "diagnosis/compute_batches_per_second": "batches/s, training step on in-memory batches",
    "diagnosis/fit_batches_per_second": "batches/s, input and training together in fit",
    "diagnosis/input_bound_fraction": "fraction 0..1 of the fit step spent waiting on input",
    "diagnosis/gpu_utilization_percent": "percent 0..100, mean during the fit measurement "
    "(written only when measured)",
}


@dataclass(frozen=True)
class DiagnosisThresholds:
    """Where one verdict ends and the next begins.

    The verdict is decided in this order, on the measured input-bound fraction ``f`` and the
    compute-only step time ``t``:

    1. ``f >= input_bound_fraction``: ``"input-bound"``.
    2. ``t < launch_overhead_step_seconds``: ``"launch-overhead-bound"``.
    3. ``f <= compute_bound_fraction``: ``"compute-bound"``.
    4. otherwise: ``"balanced"``.

    Attributes:
        input_bound_fraction: Defaults to ``0.25``: a quarter of every step spent waiting on
            input, i.e. fixing the input would make training at least 1.33x faster.
        compute_bound_fraction: Defaults to ``0.15``: at or below this, fixing the input would
            gain under 1.18x, and the fraction is within run-to-run noise on a loaded shared
            machine (up to 0.14 measured for a compute-heavy model on in-memory data, 2 CPU
            cores shared with other jobs).
        launch_overhead_step_seconds: Defaults to ``0.002`` (2 ms). A Keras ``fit`` step has a
            fixed host cost of about 1 ms (0.9 ms measured for a two-layer Dense model on CPU),
            so a compute-only step shorter than this is mostly fixed cost.

    Raises:
        TypeError: If a field is not a number.
        ValueError: If a fraction is outside ``[0, 1]``, ``compute_bound_fraction`` is not
            below ``input_bound_fraction``, or ``launch_overhead_step_seconds`` is negative.
    """

    input_bound_fraction: float = 0.25
    compute_bound_fraction: float = 0.15
    launch_overhead_step_seconds: float = 0.002

    def __post_init__(self) -> None:
        for name in ("input_bound_fraction", "compute_bound_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"`{name}` must be a number. Received: {name}={value!r}")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"`{name}` must be between 0 and 1. Received: {name}={value}")
        if self.compute_bound_fraction >= self.input_bound_fraction:
            raise ValueError(
                "`compute_bound_fraction` must be below `input_bound_fraction`. Received: "
                f"compute_bound_fraction={self.compute_bound_fraction}, "
                f"input_bound_fraction={self.input_bound_fraction}"
            )
        value = self.launch_overhead_step_seconds
        expected = (
            "`launch_overhead_step_seconds` must be a non-negative number of seconds. "
            f"Received: launch_overhead_step_seconds={value!r}"
        )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(expected)
        if value < 0:
            raise ValueError(expected)


@dataclass(frozen=True)
class Recommendation:
    """One thing to change, and the measurement that says why.

    Attributes:
        action: What to use, naming the tfthroughput option or helper (for example
            ``"build_pipeline(num_parallel_calls=tf.data.AUTOTUNE)"``).
        reason: The measured reason, with numbers.
    """

    action: str
    reason: str

    def __str__(self) -> str:
        return f"{self.action}: {self.reason}"


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
        verdict: One of :data:`VERDICTS`, decided by ``thresholds``.
        recommendations: What to change, most important first.
        gpu_utilization_percent: Mean GPU utilization (0..100) during (c), or ``None`` when
            not measured.
        thresholds: The :class:`DiagnosisThresholds` the verdict used.
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
        return _per(self.compute_batches_per_second)

    @property
    def fit_step_seconds(self) -> float:
        """Seconds per end-to-end training step."""
        return _per(self.fit_batches_per_second)

    def _rows(self) -> list[tuple[str, str, str, str]]:
        return [
            (
                "(a) input pipeline alone",
                f"{self.input_batches_per_second:,.1f}",
                f"{self.input_examples_per_second:,.0f}",
                f"{_per(self.input_batches_per_second) * 1000:,.2f}",
            ),
            (
                "(b) training step alone",
                f"{self.compute_batches_per_second:,.1f}",
                f"{self.compute_examples_per_second:,.0f}",
                f"{self.compute_step_seconds * 1000:,.2f}",
            ),
            (
                "(c) fit, both together",
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
        return [
            f"Verdict: {self.verdict} ({_VERDICT_MEANING.get(self.verdict, '')})",
            f"Input-bound fraction: {self.input_bound_fraction:.0%} of each fit step waits "
            "on input",
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
            f"tfthroughput diagnosis (batch size {self.batch_size}, "
            f"median of {self.repeats} x {self.steps} steps)",
            line(header),
            line(tuple("-" * w for w in widths)),
            *(line(row) for row in rows[1:]),
            "",
            *self._summary_lines(),
        ]
        if self.recommendations:
            lines += ["", "Recommendations:"]
            lines += [f"  {i}. {rec}" for i, rec in enumerate(self.recommendations, 1)]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The report as GitHub-flavoured markdown (also what TensorBoard's text tab shows)."""
        lines = [
            f"**tfthroughput diagnosis** (batch size {self.batch_size}, median of "
            f"{self.repeats} x {self.steps} steps)",
            "",
            "| measurement | batches/s | examples/s | ms/batch |",
            "|---|---:|---:|---:|",
            *(f"| {' | '.join(row)} |" for row in self._rows()),
            "",
            *(f"- {text}" for text in self._summary_lines()),
        ]
        if self.recommendations:
            lines += ["", "**Recommendations**", ""]
            lines += [
                f"{i}. `{rec.action}`: {rec.reason}"
                for i, rec in enumerate(self.recommendations, 1)
            ]
        return "\n".join(lines)

    def write_to_tensorboard(self, logdir: str, *, step: int = 0) -> None:
        """Write the report to a TensorBoard log folder.

        The markdown report goes to the text tab under ``diagnosis/report``; the numbers go
        to scalars (tags and units in :data:`TENSORBOARD_TAGS`).

        Args:
            logdir: Folder for the event file (created if missing), e.g. the ``log_dir`` of
                ``keras.callbacks.TensorBoard``.
            step: The step to write at. Defaults to ``0``.

        Raises:
            TypeError: If ``logdir`` is not a string/path or ``step`` not an int.
        """
        if not isinstance(logdir, (str, os.PathLike)):
            raise TypeError(f"`logdir` must be a folder path. Received: logdir={logdir!r}")
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"`step` must be an int. Received: step={step!r}")
        import tensorflow as tf

        scalars = {
            "diagnosis/input_batches_per_second": self.input_batches_per_second,
            "diagnosis/compute_batches_per_second": self.compute_batches_per_second,
            "diagnosis/fit_batches_per_second": self.fit_batches_per_second,
            "diagnosis/input_bound_fraction": self.input_bound_fraction,
        }
        if self.gpu_utilization_percent is not None:
            scalars["diagnosis/gpu_utilization_percent"] = self.gpu_utilization_percent
        writer = tf.summary.create_file_writer(os.fspath(logdir))
        try:
            with writer.as_default():
                tf.summary.text("diagnosis/report", self.to_markdown(), step=step)
                for tag, value in scalars.items():
                    tf.summary.scalar(tag, value, step=step)
            writer.flush()
        finally:
            writer.close()


def _per(rate: float) -> float:
    return 1.0 / rate if rate > 0 else float("inf")
