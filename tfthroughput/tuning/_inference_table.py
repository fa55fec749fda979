"""The printed form of an inference tuning result: a table of the trials and a verdict."""

from __future__ import annotations

from typing import Any

from tfthroughput.tuning._status import BASELINE
from tfthroughput.tuning._table import _optional, _ratio

# InferenceTuneResult and InferenceTrial (inference_result.py imports this module).
InferenceTuneResult = InferenceTrial = Any


def _row(trial: InferenceTrial, gpu: bool) -> list[str]:
    check = "" if trial.output_check is None else str(trial.output_check).split(" (")[0]
    cells = [
        trial.label,
        _optional(trial.examples_per_second, "{:,.0f}"),
        _ratio(trial),
        _optional(trial.noise, "{:.0%}"),
        _optional(trial.latency_p50_ms, "{:.2f}"),
        _optional(trial.latency_p95_ms, "{:.2f}"),
        _optional(trial.warmup_seconds, "{:.1f}"),
        _optional(trial.memory_mib, "{:,.0f}"),
    ]
    if gpu:
        cells += [
            _optional(trial.gpu_utilization, "{:.0f}"),
            _optional(trial.sm_activity, "{:.0f}"),
        ]
    cells += [check, trial.status + (f": {trial.reason}" if trial.reason else "")]
    return cells


def render(result: InferenceTuneResult) -> str:
    """The trials as an aligned table, then the choice, the snippet and the notes."""
    gpu = any(t.gpu_utilization is not None for t in result.trials)
    header = ["predict setting", "examples/s", "x baseline [spread]", "noise"]
    header += ["p50 ms", "p95 ms", "warm-up s", "MiB"]
    if gpu:
        header += ["GPU-Util %", "SM %"]
    header += ["output check", "result"]
    rows = [header] + [_row(t, gpu) for t in result.trials]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for row in rows:
        pairs = enumerate(zip(row[:-1], widths, strict=True))
        cells = [cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in pairs]
        lines.append("  ".join(cells + [row[-1]]).rstrip())
    budget = " (stopped by the time budget)" if result.stopped_by_budget else ""
    limit = result.max_batch_latency_ms
    lines.append("")
    lines.append(
        f"inference search: {len(result.trials)} trials in {result.seconds:.1f} s "
        f"(budget {result.time_budget:.0f} s){budget}"
        + ("" if limit is None else f"; latency limit {limit:g} ms per batch (p95)")
    )
    if result.improved:
        trial = result.chosen_trial
        lines.append(
            f"chosen: {trial.label}: {trial.ratio:.2f}x the baseline's examples/s "
            f"(lowest round {trial.ratio_low:.2f}x, noise {trial.noise:.0%})"
        )
        lines += ["", result.snippet]
    else:
        tried = [t for t in result.trials if t.status != BASELINE]
        why = ""
        if not tried:
            why = (
                " (the time budget ran out before any candidate: raise time_budget)"
                if result.stopped_by_budget
                else " (no knob applied: see the notes)"
            )
        lines.append(
            "chosen: the baseline, as given: nothing beat it outside the noise within the "
            "output tolerance" + ("" if limit is None else " and the latency limit") + why
        )
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)
