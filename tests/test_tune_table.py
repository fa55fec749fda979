"""tuning/_table.py: tune's printed table (aligned columns, the GPU columns only where a GPU was
sampled, a mode's extra columns), the paired figures, and the lines under the table (the search,
the choice, the confirmation, why the baseline was kept). Results are plain namespaces here, so
every line is the table's own; ``tests/test_tune_result.py`` prints the real result classes."""

from __future__ import annotations

from types import SimpleNamespace

from tfthroughput.tuning._table import (
    INFERENCE,
    TRAINING,
    confirmation_lines,
    confirmed_figure,
    none_tried,
    paired_figure,
    render,
    trial_table,
)
from tfthroughput.tuning.engine.confirmation import Confirmation
from tfthroughput.tuning.inference.output_check import OutputCheck
from tfthroughput.tuning.result import InferenceTrial, TuneTrial
from tfthroughput.tuning.setup import TuneSetup

BASE = TuneSetup(1, False, "float32", batch_size=32)
BIG = BASE.with_(batch_size=64)
XLA = BASE.with_(jit_compile=True)


def inference_trials():
    return (
        InferenceTrial(
            BASE,
            "as given",
            "baseline",
            1000.0,
            1.0,
            latency_p50_ms=1.5,
            latency_p95_ms=2.25,
            warmup_seconds=0.8,
        ),
        InferenceTrial(
            BIG,
            "batch_size=64",
            "faster",
            12345.6,
            2.5,
            2.25,
            2.75,
            0.1,
            rounds_won=5,
            rounds=5,
            latency_p50_ms=3.0,
            latency_p95_ms=3.5,
            warmup_seconds=2.04,
            memory_mib=1536.4,
            output_check=OutputCheck(0.0, 0.0, False, 0.02, 64),
        ),
        InferenceTrial(XLA, "XLA on", "failed", reason="XLA could not compile"),
    )


def test_the_table_aligns_every_cell_under_its_header():
    lines = trial_table(
        inference_trials(), first=INFERENCE.first, check=INFERENCE.check, extra=INFERENCE.extra
    )

    # The first column left-aligned, the others right-aligned to their widest cell, two spaces
    # apart; the result column last, unpadded; empty cells for what a trial did not measure.
    assert lines == [
        "predict setting  examples/s  x baseline [spread]  noise  p50 ms  p95 ms  warm-up s    "
        "MiB  output check  result",
        "as given              1,000                 1.00           1.50    2.25        0.8"
        + " " * 23
        + "baseline",
        "batch_size=64        12,346     2.50 [2.25-2.75]    10%    3.00    3.50        2.0  "
        "1,536   ok: 0.0e+00  faster",
        # 9 for the first column, 72 for the eight empty cells, 18 between them
        "XLA on" + " " * 99 + "failed: XLA could not compile",
    ]


def test_gpu_columns_appear_only_where_a_trial_sampled_a_gpu():
    trials = (
        TuneTrial(BASE, "as given", "baseline", 100.0, 1.0),
        TuneTrial(XLA, "XLA on", "within noise", 101.0, 1.01, 0.99, 1.02, 0.015, rounds=3),
    )
    header = trial_table(trials, first=TRAINING.first, check=TRAINING.check)[0]
    assert header.split() == [
        "setting",
        "examples/s",
        *("x", "baseline", "[spread]"),
        "noise",
        *("warm-up", "s"),
        "MiB",
        *("loss", "check"),
        "result",
    ]

    sampled = (
        trials[0],
        TuneTrial(XLA, "XLA on", "slower", 90.0, 0.9, 0.85, 0.95, gpu_utilization=87.4),
    )
    lines = trial_table(sampled, first=TRAINING.first, check=TRAINING.check)
    assert "GPU-Util %  SM %  loss check  result" in lines[0]
    # 87.4 % rounds to 87; the trial that measured no SM activity leaves its cell empty.
    assert lines[2].endswith("87" + " " * (2 + 4 + 2 + 10 + 2) + "slower")
    assert lines[2].index("87") + 2 == lines[0].index("GPU-Util %") + len("GPU-Util %")


def test_ratio_cells_baseline_failure_and_check_words():
    trials = (
        TuneTrial(BASE, "as given", "baseline", 100.0, 1.0),
        TuneTrial(XLA, "XLA on", "failed", reason="out of memory"),
        TuneTrial(BIG, "batch_size=64", "loss diverges", 150.0, 1.5, 1.4, 1.6, 0.07),
    )
    rows = [line.split("  ") for line in trial_table(trials, first="setting", check="loss_check")]
    cells = [[cell.strip() for cell in row if cell.strip()] for row in rows]
    assert cells[1] == ["as given", "100", "1.00", "baseline"]
    assert cells[2] == ["XLA on", "failed: out of memory"]
    assert cells[3] == ["batch_size=64", "150", "1.50 [1.40-1.60]", "7%", "loss diverges"]


def test_paired_figure_says_its_interval_and_rounds():
    found = SimpleNamespace(ratio=1.234, ratio_low=1.1, ratio_high=1.4, rounds=5)
    assert paired_figure(found) == "1.23x [1.10-1.40] (median of 5 rounds, 94% interval)"
    # 3 rounds: the min and max cover the median 75 % of the time.
    found.rounds = 3
    assert paired_figure(found) == "1.23x [1.10-1.40] (median of 3 rounds, 75% interval)"
    found.rounds = 0
    assert paired_figure(found) == "1.23x [1.10-1.40]"
    kept = SimpleNamespace(ratio=1.0, ratio_low=None, ratio_high=None, rounds=5)
    assert paired_figure(kept) == "1.00x"


def confirmation(**changes):
    values = {
        "pick": BIG,
        "setup": BIG,
        "label": "batch_size=64",
        "work": "whole predict calls",
        "rounds": 5,
        "seconds": 3.25,
        "ratio": 1.5,
        "ratio_low": 1.4,
        "ratio_high": 1.6,
        "rounds_won": 5,
    }
    return Confirmation(**{**values, **changes})


def test_the_confirmed_figure_names_the_work_and_the_rounds_won():
    assert confirmed_figure(confirmation(rounds_won=4)) == (
        "1.50x [1.40-1.60] (median of 5 rounds, 94% interval) over the baseline by whole "
        "predict calls, 4 of 5 rounds won"
    )


def result(trials, **changes):
    values = {
        "trials": trials,
        "seconds": 12.34,
        "time_budget": 60.0,
        "stopped_by_budget": False,
        "confirmation": None,
        "improved": False,
        "chosen_trial": None,
        "snippet": "model.predict(x, batch_size=64)",
        "notes": ("one note",),
    }
    return SimpleNamespace(**{**values, **changes})


def test_confirmation_lines_quote_the_search_pick_then_the_choice():
    trials = inference_trials()
    # The pick's best trial of that setup: 2.5x, not the lower repeat of the same setup.
    repeat = InferenceTrial(BIG, "batch_size=64 again", "faster", 1.0, 2.0, 1.9, 2.1, rounds=5)
    chosen = result((*trials, repeat), confirmation=confirmation(), improved=True)

    assert confirmation_lines(chosen) == [
        "search's pick: batch_size=64: 2.50x [2.25-2.75] (median of 5 rounds, 94% interval) "
        "over the baseline in the search's runs",
        "confirmation: 5 alternated rounds of whole predict calls in 3.2 s",
        "chosen: batch_size=64: 1.50x [1.40-1.60] (median of 5 rounds, 94% interval) over the "
        "baseline by whole predict calls, 5 of 5 rounds won",
        "",
        "model.predict(x, batch_size=64)",
        "note: one note",
    ]
    kept = result(trials, confirmation=confirmation(outcome="confirmation: not shown faster"))
    assert confirmation_lines(kept)[2:] == [
        "confirmation: not shown faster",
        "chosen: the baseline, as given: nothing beat it beyond the noise by whole predict calls",
        "note: one note",
    ]


def test_none_tried_says_why_no_candidate_ran():
    baseline = TuneTrial(BASE, "as given", "baseline", 100.0, 1.0)
    probe = TuneTrial(BASE, "compute only", "probe", 300.0)
    assert none_tried(result((baseline, probe), stopped_by_budget=True)) == (
        " (the time budget ran out before any candidate: raise time_budget)"
    )
    assert none_tried(result((baseline,))) == " (no knob applied: see the notes)"
    failed = TuneTrial(XLA, "XLA on", "failed", reason="out of memory")
    assert none_tried(result((baseline, failed), stopped_by_budget=True)) == ""


def test_render_kept_baseline_with_a_latency_limit_and_the_budget_spent():
    trials = inference_trials()[:1]
    kept = result(trials, stopped_by_budget=True, max_batch_latency_ms=1.5)

    lines = render(kept, INFERENCE).splitlines()
    assert lines[2:] == [
        "",
        "inference search: 1 trials in 12.3 s (budget 60 s) (stopped by the time budget); "
        "latency limit 1.5 ms per batch (p95)",
        "chosen: the baseline, as given: nothing beat it outside the noise within the output "
        "tolerance and the latency limit (the time budget ran out before any candidate: raise "
        "time_budget)",
        "note: one note",
    ]


def test_render_chosen_setup_with_a_strategy_without_a_confirmation():
    trials = (
        TuneTrial(BASE, "as given", "baseline", 100.0, 1.0),
        TuneTrial(BIG, "batch_size=64", "faster", 250.0, 2.5, 2.25, 2.75, 0.1, rounds=5),
    )
    chosen = result(
        trials, improved=True, chosen_trial=trials[1], distribution="MirroredStrategy over 2"
    )

    lines = render(chosen, TRAINING).splitlines()
    assert lines[0].startswith("setting  ") and lines[0].endswith("loss check  result")
    assert lines[len(trials) + 1 :] == [
        "",
        "search: 2 trials in 12.3 s (budget 60 s)",
        "strategy: MirroredStrategy over 2",
        "chosen: batch_size=64: 2.50x [2.25-2.75] (median of 5 rounds, 94% interval) over the "
        "baseline",
        "",
        "model.predict(x, batch_size=64)",
        "note: one note",
    ]
    inference = inference_trials()
    chosen = result(inference, improved=True, chosen_trial=inference[1])
    lines = render(chosen, INFERENCE).splitlines()
    assert lines[len(inference) + 3] == (
        "chosen: batch_size=64: 2.50x [2.25-2.75] (median of 5 rounds, 94% interval) over the "
        "baseline's examples/s"
    )


def test_render_with_a_confirmation_ends_with_its_lines():
    trials = inference_trials()
    confirmed = result(trials, improved=True, confirmation=confirmation())

    lines = render(confirmed, INFERENCE).splitlines()
    assert lines[len(trials) + 3 :] == confirmation_lines(confirmed)
    assert lines[len(trials) + 2] == "inference search: 3 trials in 12.3 s (budget 60 s)"
