"""The printed form of a :class:`~tfthroughput.tuning.result.TuneResult`: a table and a verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfthroughput._ratio_text import paired_words, ratio_text
from tfthroughput.tuning.engine.paired import sign_test_rank
from tfthroughput.tuning.engine.verdict import BASELINE, FASTER, PROBE

# The results and their trials (they import this module, so they are not imported here).
TuneResult = TuneTrial = Any
# Columns one table adds: (header, trial field, format of its value).
Extra = tuple[tuple[str, str, str], ...]


def _ratio(trial: TuneTrial) -> str:
    if trial.ratio is None:
        return ""
    if trial.status == BASELINE:
        return "1.00"
    return ratio_text(trial.ratio, trial.ratio_low, trial.ratio_high, unit="")


def paired_figure(found: Any) -> str:
    """A paired ratio with its interval and the words for it (``_ratio_text``): a trial's, a
    confirmation's or a comparison's (``ratio``, ``ratio_low``, ``ratio_high``, ``rounds``)."""
    if found.ratio_low is None:  # a confirmation that kept the baseline: no comparison
        return f"{found.ratio:.2f}x"
    words = "" if not found.rounds else paired_words(found.rounds, sign_test_rank(found.rounds)[1])
    return ratio_text(found.ratio, found.ratio_low, found.ratio_high, words)


def _optional(value: float | None, text: str) -> str:
    return "" if value is None else text.format(value)


def _row(trial: TuneTrial, gpu: bool, extra: Extra, check: str) -> list[str]:
    found = getattr(trial, check)
    cells = [
        trial.label,
        _optional(trial.examples_per_second, "{:,.0f}"),
        _ratio(trial),
        _optional(trial.noise, "{:.0%}"),
        *(_optional(getattr(trial, name), text) for _, name, text in extra),
        _optional(trial.warmup_seconds, "{:.1f}"),
        _optional(trial.memory_mib, "{:,.0f}"),
    ]
    if gpu:
        cells += [
            _optional(trial.gpu_utilization, "{:.0f}"),
            _optional(trial.sm_activity, "{:.0f}"),
        ]
    check_text = "" if found is None else str(found).split(" (")[0]
    cells += [check_text, trial.status + (f": {trial.reason}" if trial.reason else "")]
    return cells


def trial_table(trials: Any, *, first: str, check: str, extra: Extra = ()) -> list[str]:
    """The trials as aligned lines, one per trial under a header.

    Args:
        trials: The result's trials.
        first: The first column's header (the setting).
        check: The trial's check field (``"loss_check"``, ``"output_check"``), shown by its
            first words under its name.
        extra: ``(header, field, format)`` of columns between the noise and the warm-up.
    """
    gpu = any(t.gpu_utilization is not None for t in trials)
    header = [first, "examples/s", "x baseline [spread]", "noise"]
    header += [name for name, _, _ in extra] + ["warm-up s", "MiB"]
    if gpu:
        header += ["GPU-Util %", "SM %"]
    header += [check.replace("_", " "), "result"]
    rows = [header] + [_row(t, gpu, extra, check) for t in trials]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for row in rows:
        pairs = enumerate(zip(row[:-1], widths, strict=True))
        cells = [cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in pairs]
        lines.append("  ".join(cells + [row[-1]]).rstrip())
    return lines


def none_tried(result: TuneResult) -> str:
    """Why the baseline was kept without a candidate tried (after the verdict), else ``""``."""
    if any(t.status not in (BASELINE, PROBE) for t in result.trials):
        return ""
    if result.stopped_by_budget:
        return " (the time budget ran out before any candidate: raise time_budget)"
    return " (no knob applied: see the notes)"


def confirmed_figure(confirmation: Any) -> str:
    """The confirmed ratio with its interval, as the ``chosen:`` line and the snippet say it."""
    c = confirmation
    return (
        f"{paired_figure(c)} over the baseline by {c.work}, {c.rounds_won} of {c.rounds} rounds won"
    )


def confirmation_lines(result: Any) -> list[str]:
    """The search's pick with the search's figure, the confirmation, and the choice it made
    (with the snippet and the notes), for a result whose search found a faster setup."""
    c = result.confirmation
    pick = max(
        (t for t in result.trials if t.setup == c.pick and t.status == FASTER),
        key=lambda t: t.ratio,
    )
    lines = [
        f"search's pick: {pick.label}: {paired_figure(pick)} over the baseline in the "
        "search's runs",
        f"confirmation: {c.rounds} alternated rounds of {c.work} in {c.seconds:.1f} s",
    ]
    if c.outcome:
        lines.append(c.outcome)
    if result.improved:
        lines += [f"chosen: {c.label}: {confirmed_figure(c)}", "", result.snippet]
    else:
        kept = "chosen: the baseline, as given: nothing beat it beyond the noise by "
        lines.append(kept + c.work)
    return lines + [f"note: {note}" for note in result.notes]


@dataclass(frozen=True)
class TableWords:
    """What a mode's table says differently; the table itself is one.

    Attributes:
        first: The first column's header.
        check: The trial's check field (``"loss_check"``, ``"output_check"``).
        extra: Columns between the noise and the warm-up.
        search: The search line's first word(s).
        unit: What the chosen ratio is of (without a confirmation).
        kept: What the baseline was kept within, after "outside the noise".
    """

    first: str
    check: str
    extra: Extra = ()
    search: str = "search"
    unit: str = "the baseline"
    kept: str = ""


TRAINING = TableWords("setting", "loss_check")
INFERENCE = TableWords(
    "predict setting",
    "output_check",
    extra=(("p50 ms", "latency_p50_ms", "{:.2f}"), ("p95 ms", "latency_p95_ms", "{:.2f}")),
    search="inference search",
    unit="the baseline's examples/s",
    kept=" within the output tolerance",
)


def render(result: Any, words: TableWords = TRAINING) -> str:
    """The trials as an aligned table, then the choice, the snippet and the notes."""
    lines = trial_table(result.trials, first=words.first, check=words.check, extra=words.extra)
    budget = " (stopped by the time budget)" if result.stopped_by_budget else ""
    limit = getattr(result, "max_batch_latency_ms", None)
    lines.append("")
    lines.append(
        f"{words.search}: {len(result.trials)} trials in {result.seconds:.1f} s "
        f"(budget {result.time_budget:.0f} s){budget}"
        + ("" if limit is None else f"; latency limit {limit:g} ms per batch (p95)")
    )
    if getattr(result, "distribution", None) is not None:
        lines.append(f"strategy: {result.distribution}")
    if result.confirmation is not None:
        return "\n".join(lines + confirmation_lines(result))
    if result.improved:
        trial = result.chosen_trial
        lines.append(f"chosen: {trial.label}: {paired_figure(trial)} over {words.unit}")
        lines += ["", result.snippet]
    else:
        lines.append(
            "chosen: the baseline, as given: nothing beat it outside the noise"
            + words.kept
            + ("" if limit is None else " and the latency limit")
            + none_tried(result)
        )
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)
