"""What one monitored ``fit``, ``evaluate`` or ``predict`` call measured, in a few lines: the
summary ``tfthroughput run`` prints when the script ends.

Read from the call's event files (the same reader as the report), so the summary states what
TensorBoard and the report show. The reading at the end is a first hint from the hardware
figures alone, with the next thing to try; ``tfthroughput.diagnose`` measures the cause.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfthroughput.report.folder_events import load_folder_events
from tfthroughput.report.steady_epochs import steady_epochs

# GPU-Util (steady median) from which the GPU counts as busy.
BUSY_GPU_PERCENT = 80.0
# Host CPU (steady median, all cores) from which the host counts as busy.
BUSY_HOST_PERCENT = 80.0
NO_GPU = "not measured (no NVIDIA GPU, driver or NVML library here)"
_GPU_UTIL = re.compile(r"^(gpu\d+)/utilization_percent/mean$")


@dataclass(frozen=True)
class CallSummary:
    """One monitored call's figures.

    Attributes:
        kind: ``"fit"``, ``"evaluate"`` or ``"predict"``.
        name: The run's name, e.g. ``"fit-1"``.
        epochs: Epochs measured; for ``evaluate`` or ``predict``, the calls its run measured
            (a monitor passed to several, or autolog's for a model's calls), 0 if none ended.
        examples_per_second: Steady examples/s, each epoch after the first when there are
            two or more (:func:`~tfthroughput.report.steady_epochs.steady_epochs`).
        gpu_percent: ``{gpu<i>: steady median GPU-Util}``; empty where no GPU was sampled.
        host_cpu_percent: Steady median host CPU (all cores), or None.
    """

    kind: str
    name: str
    epochs: int
    examples_per_second: tuple[float, ...]
    gpu_percent: Mapping[str, float]
    host_cpu_percent: float | None

    @property
    def steady_examples_per_second(self) -> float | None:
        """The median of :attr:`examples_per_second`, or None."""
        values = self.examples_per_second
        return statistics.median(values) if values else None

    def reading(self) -> str:
        """One line: what the figures suggest, and the next thing to try."""
        if not self.epochs:
            return "no epoch ended, so nothing was measured"
        busiest = max(self.gpu_percent.values(), default=None)
        host_busy = (self.host_cpu_percent or 0.0) >= BUSY_HOST_PERCENT
        if busiest is None:
            if host_busy:
                return (
                    "no GPU sampled, the host CPU is busy: it ran on the CPU; `tfthroughput info`"
                )
            return "no GPU sampled; `tfthroughput info` lists what this machine has"
        if busiest >= BUSY_GPU_PERCENT:
            return "the GPU is busy; next: `mixed_float16`, more work per step, `tfthroughput tune`"
        if host_busy:
            return (
                "the GPU waits, the host CPU is busy: likely the input; next: `build_pipeline`, "
                "`diagnose`"
            )
        return (
            "the GPU waits, the host is idle: launch overhead? next: "
            "`compile(steps_per_execution=32)`"
        )

    def lines(self) -> list[str]:
        """The call's lines of the summary."""
        unit = "epoch" if self.kind == "fit" else "call"
        epochs = f"{self.epochs} {unit}{'s' * (self.epochs != 1)}"
        if self.kind != "fit" and not self.epochs:
            epochs = "no call ended"
        return [
            f"{self.name}: {epochs}, {self._throughput()}",
            f"  GPU busy: {self._gpus()}; host CPU: {_percent(self.host_cpu_percent)}",
            f"  reading: {self.reading()}",
        ]

    def _throughput(self) -> str:
        median = self.steady_examples_per_second
        if median is None:
            return "examples/s not logged"
        values = self.examples_per_second
        unit = "epochs" if self.kind == "fit" else "calls"
        which = f"{unit} 2+" if self.epochs >= 2 else "all"
        spread = f" (range {min(values):,.0f}-{max(values):,.0f})" if len(values) > 1 else ""
        return f"{median:,.0f} examples/s, {which}{spread}"

    def _gpus(self) -> str:
        if not self.gpu_percent:
            return NO_GPU
        return ", ".join(f"{gpu} {value:.0f} %" for gpu, value in sorted(self.gpu_percent.items()))


def read_call_summary(kind: str, name: str, run_dir: str) -> CallSummary:
    """The summary of the call whose monitor wrote ``run_dir``.

    Args:
        kind: ``"fit"``, ``"evaluate"`` or ``"predict"`` (their tags: ``epoch/...``,
            ``evaluate/...``, ``predict/...``).
        name: The run's name.
        run_dir: The folder of its event files.

    Returns:
        The call's figures; no epoch where nothing was written.
    """
    scalars = load_folder_events(run_dir).scalars
    # A fit's figures are per epoch (epoch/...); an evaluate's or predict's, per call (predict/...).
    prefix = "" if kind == "fit" else f"{kind}/"
    figures = "epoch/" if kind == "fit" else prefix
    throughput = _values(scalars, f"{figures}examples_per_second")
    epochs = len(_values(scalars, f"{figures}seconds"))
    gpus = {}
    for tag in scalars:
        match = _GPU_UTIL.match(tag[len(prefix) :]) if tag.startswith(prefix) else None
        if match:
            gpus[match.group(1)] = _steady_median(_values(scalars, tag))
    host = _values(scalars, f"{prefix}host/cpu_percent/mean")
    return CallSummary(
        kind,
        name,
        epochs,
        tuple(steady_epochs(throughput)),
        gpus,
        _steady_median(host) if host else None,
    )


def _values(scalars: Mapping[str, Sequence[tuple[int, float]]], tag: str) -> list[float]:
    return [value for _, value in scalars.get(tag, ())]


def _steady_median(values: Sequence[float]) -> float:
    return statistics.median(steady_epochs(values))


def _percent(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.0f} %"
