"""The printed form of an inference tuning result: a table of the trials and a verdict."""

from __future__ import annotations

from typing import Any

from tfthroughput.tuning._table import confirmation_lines, none_tried, trial_table

# InferenceTuneResult and InferenceTrial (inference_result.py imports this module).
InferenceTuneResult = Any
_LATENCY = (("p50 ms", "latency_p50_ms", "{:.2f}"), ("p95 ms", "latency_p95_ms", "{:.2f}"))


def render(result: InferenceTuneResult) -> str:
    """The trials as an aligned table, then the choice, the snippet and the notes."""
    lines = trial_table(
        result.trials, first="predict setting", check="output_check", extra=_LATENCY
    )
    budget = " (stopped by the time budget)" if result.stopped_by_budget else ""
    limit = result.max_batch_latency_ms
    lines.append("")
    lines.append(
        f"inference search: {len(result.trials)} trials in {result.seconds:.1f} s "
        f"(budget {result.time_budget:.0f} s){budget}"
        + ("" if limit is None else f"; latency limit {limit:g} ms per batch (p95)")
    )
    if result.confirmation is not None:
        return "\n".join(lines + confirmation_lines(result))
    if result.improved:
        trial = result.chosen_trial
        lines.append(
            f"chosen: {trial.label}: {trial.ratio:.2f}x the baseline's examples/s "
            f"(lowest round {trial.ratio_low:.2f}x, noise {trial.noise:.0%})"
        )
        lines += ["", result.snippet]
    else:
        lines.append(
            "chosen: the baseline, as given: nothing beat it outside the noise within the "
            "output tolerance"
            + ("" if limit is None else " and the latency limit")
            + none_tried(result)  # no inference trial is a probe
        )
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)
