"""From diagnose's measurements to a verdict.

Pure rules, no TensorFlow: the thresholds that separate the verdicts and the verdict itself.
What to change for a verdict is in :mod:`tfthroughput.diagnosis.recommendations`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tfthroughput.hardware.activity import overstates_work

INPUT_BOUND = "input-bound"
COMPUTE_BOUND = "compute-bound"
BALANCED = "balanced"
LAUNCH_OVERHEAD_BOUND = "launch-overhead-bound"


@dataclass(frozen=True)
class DiagnosisThresholds:
    """Where one verdict ends and the next begins.

    The verdict is decided in this order, on the measured input-bound fraction ``f`` and the
    compute-only step time ``t``:

    1. ``f >= input_bound_fraction``: ``"input-bound"``.
    2. ``t < launch_overhead_step_seconds``, or GPU-Util far above SM activity (where SM
       activity was measured: tiny kernels, :func:`tiny_kernels`): ``"launch-overhead-bound"``.
    3. ``f <= compute_bound_fraction``: ``"compute-bound"``.
    4. otherwise: ``"balanced"``.

    Attributes:
        input_bound_fraction: The share of every step spent waiting on input from which
            fixing the input is the change that pays most.
        compute_bound_fraction: At or below this share, fixing the input would gain little,
            and the share is within run-to-run noise.
        launch_overhead_step_seconds: A compute-only step shorter than this is mostly Keras's
            fixed host cost per step.

    Why these values: ``docs/benchmarks.md`` ("The diagnosis thresholds' measurements").

    Raises:
        TypeError: If a threshold is not a number.
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


def per(rate: float) -> float:
    """Seconds per item at ``rate`` items per second."""
    return 1.0 / rate if rate > 0 else float("inf")


def input_bound_fraction(compute_rate: float, fit_rate: float) -> float:
    """Share of the fit step beyond the compute-only step: ``(t_fit - t_compute) / t_fit``."""
    if not compute_rate > 0 or math.isinf(compute_rate):
        return 0.0
    return min(1.0, max(0.0, 1.0 - fit_rate / compute_rate))


def verdict(
    fraction: float,
    compute_step_seconds: float,
    thresholds: DiagnosisThresholds,
    *,
    gpu_utilization: float | None = None,
    sm_activity: float | None = None,
) -> str:
    """The verdict for an input-bound fraction and a compute-only step time, and GPU-Util
    against SM activity where both were measured."""
    if fraction >= thresholds.input_bound_fraction:
        return INPUT_BOUND
    if compute_step_seconds < thresholds.launch_overhead_step_seconds or tiny_kernels(
        gpu_utilization, sm_activity
    ):
        return LAUNCH_OVERHEAD_BOUND
    if fraction <= thresholds.compute_bound_fraction:
        return COMPUTE_BOUND
    return BALANCED


def tiny_kernels(gpu_utilization: float | None, sm_activity: float | None) -> bool:
    """GPU-Util far above SM activity: kernels ran, but too small to fill the GPU."""
    return (
        gpu_utilization is not None
        and sm_activity is not None
        and overstates_work(gpu_utilization, sm_activity)
    )
