"""The engine's contract (tuning/engine/contract.py): the records every search and knob share
(SearchSettings, Proposal, Mode, BestSoFar), the Workload a mode subclasses and the read-only
SearchView a knob is given. No model and no search run here: a stand-in for the search holds
the few attributes the view reads."""

from __future__ import annotations

import dataclasses
import sys
from types import SimpleNamespace

import pytest

from tfthroughput.tuning.engine.contract import (
    BestSoFar,
    Mode,
    Proposal,
    SearchSettings,
    SearchView,
    Workload,
)
from tfthroughput.tuning.engine.measure import Comparison
from tfthroughput.tuning.setup import TuneSetup

GIVEN = TuneSetup(1, False, "float32", batch_size=8)
FASTER_SETUP = GIVEN.with_(steps_per_execution=4)


def settings(**changes) -> SearchSettings:
    fields = dict(
        steps=10,
        rounds=3,
        time_budget=60.0,
        seed=0,
        max_steps_per_execution=8,
        policy=None,
        try_xla=False,
        notes=("a note",),
    )
    return SearchSettings(**(fields | changes))


def comparison(ratio: float) -> Comparison:
    return Comparison(80.0 * ratio, 80.0, ratio, ratio, ratio, 0.0)


def test_the_settings_are_keyword_only_frozen_and_confirm_nothing_by_default():
    told = settings()
    assert told.confirm_rounds == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        told.rounds = 5
    with pytest.raises(TypeError):
        SearchSettings(10, 3, 60.0, 0, 8, None, False, ())


def test_a_proposal_has_no_label_and_is_no_probe_by_default():
    proposal = Proposal(FASTER_SETUP)
    assert (proposal.setup, proposal.label, proposal.probe) == (FASTER_SETUP, None, False)
    assert Proposal(GIVEN, "compute only", probe=True).label == "compute only"


def test_a_mode_tells_no_epoch_latency_limit_or_pipeline_unless_given():
    mode = Mode("data", frozenset({"failed"}), 4, lambda setup: (8, ""))
    assert (mode.epoch_steps, mode.latency_limit_ms, mode.pipeline_plan) == (None, None, None)
    assert mode.baseline_p95_ms() is None
    assert mode.steps_per_execution_bound(GIVEN) == (8, "")


def test_the_best_so_far_has_the_ratio_of_its_comparison_and_the_baseline_one():
    assert BestSoFar(GIVEN).ratio == 1.0
    assert BestSoFar(GIVEN).comparison is None and BestSoFar(GIVEN).reference is None
    best = BestSoFar(FASTER_SETUP, comparison(2.5), reference="outputs")
    assert (best.ratio, best.reference) == (2.5, "outputs")


def test_the_workload_contract_is_five_methods():
    methods = {
        name
        for name, value in vars(Workload).items()
        if callable(value) and not name.startswith("_")
    }
    assert methods == {"baseline", "candidate", "judge", "confirmation", "result"}
    assert sys.modules[Workload.__module__].Runner.__doc__


def test_a_workload_that_defines_none_of_the_methods_raises_on_each_and_has_no_knobs():
    workload = Workload()
    assert workload.knobs == () and workload.best_margin == 0.0
    calls = {
        "baseline": lambda: workload.baseline(),
        "candidate": lambda: workload.candidate(None, Proposal(GIVEN)),
        "judge": lambda: workload.judge(None, Proposal(GIVEN), None, None),
        "confirmation": lambda: workload.confirmation(None, [], 100.0),
        "result": lambda: workload.result(trials=()),
    }
    for call in calls.values():
        with pytest.raises(NotImplementedError):
            call()


def _stand_in_search():
    """What a SearchView reads of ``engine.search.Search``."""
    return SimpleNamespace(
        base=SimpleNamespace(setup=GIVEN, reference="baseline outputs"),
        best=BestSoFar(FASTER_SETUP, comparison(2.0)),
        settings=settings(),
        workload=SimpleNamespace(mode=Mode(None, frozenset(), 1, lambda setup: (1, ""))),
        notes=["a note"],
    )


def test_a_search_view_reads_the_search_as_it_is_now():
    search = _stand_in_search()
    view = SearchView(search)

    assert view.base == GIVEN
    assert view.base_runner is search.base
    assert view.best.ratio == 2.0 and view.settings is search.settings
    assert view.mode is search.workload.mode
    search.best = BestSoFar(GIVEN.with_(jit_compile=True), comparison(3.0))
    assert view.best.ratio == 3.0  # not a copy taken when the view was made


def test_a_search_view_adds_each_note_once_and_writes_nothing_else():
    search = _stand_in_search()
    view = SearchView(search)

    view.note("a note")
    view.note("XLA not tried: a layer does not support it")
    view.note("XLA not tried: a layer does not support it")
    assert search.notes == ["a note", "XLA not tried: a layer does not support it"]
    for name in ("base", "base_runner", "best", "settings", "mode"):
        with pytest.raises(AttributeError):
            setattr(view, name, None)
