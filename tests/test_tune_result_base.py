"""tuning/_result_base.py: what both tune results share, on a minimal result class of its own
(the real ones print in tests/test_tune_result.py): the choice (``improved``, ``chosen_trial``,
``speedup``), the JSON in its order with each trial's check, the snippet's first lines, the
table under the class's words and the Text-tab record under its tag."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from events import summary_values

from tfthroughput.tuning._result_base import ResultBase, TrialBase, trial_dict
from tfthroughput.tuning._table import TableWords
from tfthroughput.tuning.engine.confirmation import Confirmation
from tfthroughput.tuning.inference.output_check import OutputCheck
from tfthroughput.tuning.setup import TuneSetup

BASE = TuneSetup(1, False, "float32", batch_size=32)
FAST = BASE.with_(steps_per_execution=8, jit_compile=True)


@dataclass(frozen=True)
class Trial(TrialBase):
    """The leading fields, and what the table reads besides."""

    warmup_seconds: float | None = None
    memory_mib: float | None = None
    gpu_utilization: float | None = None
    sm_activity: float | None = None
    check: OutputCheck | None = None
    reason: str = ""


@dataclass(frozen=True)
class Result(ResultBase):
    """A mode of its own: its words, its tag, one JSON value."""

    _words: ClassVar[TableWords] = TableWords("my setting", "check", search="my search")
    _tag: ClassVar[str] = "my/result"

    notes: tuple[str, ...] = ()
    confirmation: Confirmation | None = None

    def _mode_dict(self) -> dict[str, Any]:
        return {"mode_value": 7}

    @property
    def snippet(self) -> str:
        return "\n".join(self._snippet_start() + ["model = build_model()"])


def trials():
    check = OutputCheck(0.0, 0.0, True, 1e-6, 64)
    return (
        Trial(BASE, "as given", "baseline", 1000.0, 1.0),
        Trial(FAST, "fast", "faster", 2000.0, 2.0, 1.8, 2.2, 0.1, 5, 5, check=check),
        Trial(FAST, "fast again", "faster", 2500.0, 2.5, 2.3, 2.7, 0.08, 5, 5, check=check),
        Trial(FAST, "fast, failed", "failed", reason="out of memory"),
    )


def result(chosen=FAST, **fields):
    return Result(BASE, chosen, trials(), 12.0, 60.0, **fields)


def confirmation(ratio=1.3):
    return Confirmation(FAST, FAST, "fast", "whole calls", 5, 2.0, ratio, 1.2, 1.4, 0.07, 5)


def test_the_chosen_trial_is_its_best_faster_trial_and_gives_the_speedup():
    chosen = result()
    assert chosen.improved and chosen.chosen_trial.label == "fast again"
    assert chosen.speedup == 2.5
    assert chosen.compile_kwargs == {"steps_per_execution": 8, "jit_compile": True}
    kept = result(chosen=BASE)
    assert not kept.improved and kept.chosen_trial.label == "as given"
    assert kept.speedup == 1.0 and kept.compile_kwargs["steps_per_execution"] == 1


def test_the_confirmation_ratio_is_the_speedup_where_one_ran():
    assert result(confirmation=confirmation(1.3)).speedup == 1.3
    # A baseline trial without a comparison (ratio None) still reads 1.0.
    unmeasured = Result(BASE, BASE, (Trial(BASE, "as given", "baseline"),), 1.0, 60.0)
    assert unmeasured.speedup == 1.0


def test_the_json_keeps_its_order_and_each_trial_check_with_its_verdict():
    values = json.loads(result(notes=("a note",)).to_json())
    assert list(values) == [
        "baseline",
        "chosen",
        "speedup",
        "seconds",
        "time_budget",
        "stopped_by_budget",
        "compile_kwargs",
        "mode_value",
        "notes",
        "trials",
        "confirmation",
    ]
    assert values["chosen"] == {
        "steps_per_execution": 8,
        "jit_compile": True,
        "policy": "float32",
        "pipeline": False,
        "batch_size": 32,
        "augment_on_device": False,
    }
    assert (values["speedup"], values["notes"], values["confirmation"]) == (2.5, ["a note"], None)
    faster = values["trials"][1]
    assert faster["setup"] == values["chosen"] and faster["label"] == "fast"
    assert faster["check"] == {
        "max_abs_difference": 0.0,
        "max_rel_difference": 0.0,
        "same_arithmetic": True,
        "tolerance": 1e-6,
        "examples": 64,
        "passed": True,
    }
    assert result(notes=("a note",)).to_dict()["notes"] == ["a note"]  # a list, as JSON reads
    confirmed = json.loads(result(confirmation=confirmation()).to_json())["confirmation"]
    assert confirmed["pick"] == values["chosen"] and confirmed["ratio"] == 1.3


def test_a_failed_check_is_written_with_passed_false():
    check = OutputCheck(0.2, 0.05, False, 0.02, 8)
    trial = Trial(FAST, "off", "outputs differ", 900.0, 0.9, 0.8, 1.0, check=check)
    written = trial_dict(trial, "check")
    assert written["check"]["passed"] is False and written["check"]["max_rel_difference"] == 0.05
    assert written["setup"]["steps_per_execution"] == 8 and written["status"] == "outputs differ"


def test_the_snippet_starts_with_the_confirmed_figure_and_the_policy():
    policy = FAST.with_(policy="mixed_float16")
    confirmed = Result(
        BASE,
        policy,
        (Trial(policy, "p", "faster", 1.0, 1.5, 1.4, 1.6),),
        1.0,
        60.0,
        confirmation=confirmation(),
    )
    assert confirmed.snippet.splitlines() == [
        "# 1.30x [1.20-1.40] (median of 5 rounds, 94% interval) over the baseline by whole "
        "calls, 5 of 5 rounds won",
        "tfthroughput.mixed_precision('mixed_float16')  # before building",
        "model = build_model()",
    ]
    assert result().snippet == "model = build_model()"
    # A confirmation that kept the baseline has no figure to quote.
    assert result(chosen=BASE, confirmation=confirmation()).snippet == "model = build_model()"


def test_the_table_is_in_the_class_words_and_its_record_under_its_tag(tmp_path):
    shown = result()
    lines = str(shown).splitlines()
    assert lines[0].split()[:3] == ["my", "setting", "examples/s"]
    assert lines[0].endswith("check  result")
    assert "my search: 4 trials in 12.0 s (budget 60 s)" in lines

    shown.write_to_tensorboard(str(tmp_path))
    entries = {
        value.tag: value.tensor.string_val[0].decode()
        for _, value in summary_values(tmp_path, "text")
    }
    assert set(entries) == {"my/result", "my/result_json"}
    # A Markdown code block: every line indented by four spaces.
    assert entries["my/result"].splitlines() == ["    " + line for line in lines]
    assert json.loads(entries["my/result_json"]) == json.loads(shown.to_json())


def test_a_result_class_must_say_its_json_values():
    @dataclass(frozen=True)
    class Unfinished(ResultBase):
        _words: ClassVar[TableWords] = TableWords("setting", "check")
        _tag: ClassVar[str] = "unfinished"
        notes: tuple[str, ...] = ()
        confirmation: Confirmation | None = None

    with pytest.raises(NotImplementedError):
        Unfinished(BASE, BASE, trials(), 1.0, 60.0).to_dict()
