"""The reading of ``input/wait_percent`` in words: is the input the limit, or the step?

Written as a text entry of each epoch (tag ``input/reading``) and printed once when ``fit``
ends. The thresholds follow xprof's input-pipeline analyzer, which calls a step "highly input
bound" above 20 % of its time waiting for input and "moderately" above 5 %: the same figures
here, because the share is the same quantity (xprof reads it from a profiled handful of
steps, the monitor from every step of the ``fit``). The device's own figure is shown beside it
where there is one (GPU-Util), else the host's CPU, so the reading can be checked against what
the hardware did.
"""

from __future__ import annotations

from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.text_entries import text_summary

# Percent of a phase spent waiting for batches from which it is called input-bound, and below
# which the step itself is the limit (between them: partly input-bound). xprof's figures.
INPUT_BOUND_PERCENT = 20.0
STEP_BOUND_PERCENT = 5.0
TAG = "input/reading"
ADVICE = "try build_pipeline / tfthroughput.diagnose"


def input_reading(wait_percent: float | None, stats: WindowStats | None = None) -> str | None:
    """The reading of a phase that waited ``wait_percent`` of its time for batches, with the
    mean GPU-Util (else host CPU) of ``stats`` beside it; ``None`` where the wait is unknown.

    Example:
        >>> input_reading(62.4).split(": ")[0]
        'input-bound (62 % of the time waiting for batches)'
        >>> input_reading(1.2)
        'the step itself is the limit (1 % of the time waiting for batches)'
    """
    if wait_percent is None:
        return None
    waiting = f"{wait_percent:.0f} % of the time waiting for batches{_hardware(stats)}"
    if wait_percent >= INPUT_BOUND_PERCENT:
        return f"input-bound ({waiting}): {ADVICE}"
    if wait_percent >= STEP_BOUND_PERCENT:
        return f"partly input-bound ({waiting}): {ADVICE}"
    return f"the step itself is the limit ({waiting})"


def _hardware(stats: WindowStats | None) -> str:
    if stats is None:
        return ""
    utilization = [
        value.mean for key, value in stats.items() if key.metric == "utilization_percent"
    ]
    if utilization:
        return f"; GPU-Util {sum(utilization) / len(utilization):.0f} %"
    cpu = [value.mean for key, value in stats.items() if key.metric == "cpu_percent"]
    return f"; host CPU {cpu[0]:.0f} %" if cpu else ""


class FitWait:
    """The wait over a whole ``fit``: each epoch's share weighted by its training time."""

    def __init__(self) -> None:
        self.waited = 0.0
        self.seconds = 0.0
        self.stats: WindowStats | None = None  # the last epoch's, for the hardware beside it

    def add(self, wait_percent: float | None, seconds: float | None, stats: WindowStats) -> None:
        if wait_percent is None or not seconds:
            return
        self.waited += wait_percent / 100 * seconds
        self.seconds += seconds
        self.stats = stats

    def write_reading(self, writer, epoch: int, part, phase: str | None) -> None:
        """Add an epoch's (a call's) training part ``part`` (an ``epoch_parts.PhasePart``),
        and write its reading as a text entry at ``step=epoch`` through the run's
        ``EventWriter``."""
        self.add(part.wait_percent, part.seconds, part.stats)
        line = input_reading(part.wait_percent, part.stats)
        if line is not None:
            tag = TAG if phase is None else f"{phase}/{TAG}"
            writer.write_summary(epoch, text_summary(tag, line), f"the reading of epoch {epoch}")

    def reading(self) -> str | None:
        """The ``fit``'s reading, ``None`` where no epoch measured its wait."""
        if not self.seconds:
            return None
        return input_reading(100 * self.waited / self.seconds, self.stats)
