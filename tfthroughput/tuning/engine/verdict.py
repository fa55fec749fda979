"""What the search judges alike in both modes: the statuses a trial can end with (as its table
shows them), whether a trial may start within the budget, the baseline's trial as given, and
a measured trial's speed verdict and figures. What each workload checks besides (the loss,
the outputs, the latency limit) stays with it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from tfthroughput.tuning.engine.measure import Comparison
from tfthroughput.tuning.engine.paired import FASTER as PAIRED_FASTER
from tfthroughput.tuning.engine.paired import SLOWER as PAIRED_SLOWER
from tfthroughput.tuning.setup import TuneSetup

# The statuses of a trial, as its table shows them.
BASELINE = "baseline"
FASTER = "faster"
NOT_FASTER = "within noise"
SLOWER = "slower"
FAILED = "failed"
REJECTED = "loss diverges"
PROBE = "probe"
# Inference only (tune(..., mode="inference")).
OUTPUTS_DIFFER = "outputs differ"
OVER_LATENCY = "over latency limit"

# A margin over the dearest recent trial: trials of one search vary by a few tens of percent
# on a shared machine (docs/tuning.md, "Why the search is shaped so").
BUDGET_MARGIN = 1.25


def over_budget(elapsed: float, costs: Sequence[float], time_budget: float) -> bool:
    """Whether a trial started now could end after ``time_budget`` seconds: ``elapsed`` plus
    the margin over the dearest of the last three trial ``costs``."""
    return elapsed + BUDGET_MARGIN * max(costs[-3:]) > time_budget


def describe(setup: TuneSetup) -> str:
    """The baseline's setting, as its label shows it."""
    batch = "" if setup.batch_size is None else f", batch {setup.batch_size}"
    xla = "on" if setup.jit_compile else "off"
    return f"steps_per_execution={setup.steps_per_execution}, XLA {xla}, {setup.policy}{batch}"


def as_given(runner: Any, speeds: Sequence[float | None]) -> dict[str, Any]:
    """The baseline trial's fields, as keyword arguments of the trial: its runner's figures,
    and the median of its examples/s (the rounds', or its own run's where no comparison ran;
    ratio 1 by definition)."""
    speed = statistics.median(speeds) if speeds and speeds[0] is not None else None
    return {
        "setup": runner.setup,
        "label": "as given: " + describe(runner.setup),
        "status": BASELINE,
        **runner.figures(),
        "examples_per_second": speed,
        "ratio": None if speed is None else 1.0,
    }


def speed_status(comparison: Comparison) -> str:
    """The paired rule's verdict (``engine.paired``): faster, slower, or not shown faster."""
    verdict = comparison.verdict
    return (
        FASTER if verdict == PAIRED_FASTER else SLOWER if verdict == PAIRED_SLOWER else NOT_FASTER
    )


def measured(comparison: Comparison) -> dict[str, Any]:
    """The trial fields a comparison gives, as keyword arguments of the trial."""
    return {
        "examples_per_second": comparison.examples_per_second,
        "ratio": comparison.ratio,
        "ratio_low": comparison.ratio_low,
        "ratio_high": comparison.ratio_high,
        "noise": comparison.noise,
        "rounds_won": comparison.rounds_won,
        "rounds": comparison.rounds,
        "gpu_utilization": comparison.gpu_utilization,
        "sm_activity": comparison.sm_activity,
    }
