"""The confirmation's rule (tuning/engine/confirmation.py) on fake runners, and the size of its
pieces of work (tuning/training/whole_epochs.py, InferenceData.whole_feed): no fit, no clock."""

from __future__ import annotations

import numpy as np
import pytest

from tfthroughput.tuning.engine.confirmation import (
    WholeRuns,
    confirm,
    contenders,
    picks,
    run_examples,
)
from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.engine.verdict import FASTER, NOT_FASTER
from tfthroughput.tuning.inference.data import inference_data
from tfthroughput.tuning.result import TuneTrial
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training.data import training_data
from tfthroughput.tuning.training.whole_epochs import epoch_feed, epoch_plan

BASE = TuneSetup(1, False, "float32", batch_size=32)
SPE8, SPE4 = BASE.with_(steps_per_execution=8), BASE.with_(steps_per_execution=4)
XLA = BASE.with_(jit_compile=True)


class Fake:
    """Seconds per run of each setup, in turn; the setups whose runners were made (in
    ``started``) and how many runners were closed."""

    def __init__(self, seconds, fail=()):
        self._seconds, self._fail = seconds, set(fail)
        self.started, self.closed = [], 0

    def runner_for(self, setup):
        """The setup's runner, not yet started: ``confirm`` starts it, which raises for the
        setups that fail."""
        self.started.append(setup)
        failing = setup in self._fail
        runs = list(self._seconds.get(setup, [1.0]))

        class Runner:
            def start(_):
                if failing:
                    raise TrialFailed("out of memory")

            def rewarm(_):
                pass

            def run(_):
                return runs.pop(0) if len(runs) > 1 else runs[0]

            def close(_):
                self.closed += 1

        return WholeRuns(Runner(), examples=100)


def trial(setup, ratio, status=FASTER):
    return TuneTrial(setup, setup.changes_from(BASE), status, ratio=ratio)


def test_picks_put_the_searchs_pick_first_then_the_faster_by_ratio():
    trials = [
        TuneTrial(BASE, "as given", "baseline", ratio=1.0),
        trial(SPE4, 3.0),
        trial(SPE8, 2.5),
        trial(BASE.with_(jit_compile=True), 4.0, NOT_FASTER),
    ]
    assert picks(trials, SPE8, BASE) == [
        (SPE8, "steps_per_execution=8"),
        (SPE4, "steps_per_execution=4"),
    ]


def test_the_next_best_is_a_faster_setup_off_the_picks_steps_per_execution_line_where_one_is():
    # The search's pick, steps_per_execution=8, then a neighbour on its line (4, at 3.0x) and
    # the pick with its pipeline rebuilt (2.8x): the search's short runs each restart the
    # input, so the rebuilt pipeline's gain in the user's epochs is judged by the confirmation.
    rebuilt = SPE8.with_(pipeline=True)
    trials = [trial(SPE8, 3.2), trial(SPE4, 3.0), trial(rebuilt, 2.8), trial(XLA, 1.5)]
    assert [setup for setup, _ in picks(trials, SPE8, BASE)] == [SPE8, rebuilt, XLA, SPE4]


def test_a_second_rival_covers_the_input_pipeline_where_the_next_best_does_not():
    # The search's pick runs in bfloat16; its float32 twin is the next-best off its line; the
    # rebuilt pipeline, ranked third by the search (whose runs each restart the input), is
    # timed too, and wins where it beats both round by round.
    pick = SPE8.with_(policy="mixed_bfloat16")
    rebuilt = SPE8.with_(pipeline=True)
    trials = [trial(pick, 3.4), trial(SPE8, 3.3), trial(rebuilt, 3.0), trial(XLA, 1.5)]
    timed = contenders(picks(trials, pick, BASE), BASE)
    assert [setup for setup, _ in timed] == [pick, SPE8, rebuilt]

    fake = Fake({BASE: [1.0], pick: [0.5], SPE8: [0.45], rebuilt: [0.2]})
    found = confirm(fake.runner_for, BASE, timed, rounds=5, clock=lambda: 0.0, work="w")
    assert found.setup == rebuilt and found.ratio == 5.0
    assert "; the best with the pipeline rebuilt, " in found.outcome


def test_no_second_rival_where_no_faster_setup_changes_the_pipeline():
    # The next-best (XLA) keeps the pick's pipeline and no faster setup rebuilds it: the pick
    # and one rival.
    trials = [trial(SPE8, 3.2), trial(SPE4, 3.0), trial(XLA, 1.5)]
    assert [setup for setup, _ in contenders(picks(trials, SPE8, BASE), BASE)] == [SPE8, XLA]


def test_no_second_rival_that_adds_a_knob_the_searchs_warm_runs_overrate():
    # The pick in float32 without the pipeline; the next-best rebuilds it; the bfloat16 twin,
    # below the pick in the search whose warm runs skip a policy's set-up, is not timed.
    rebuilt = SPE8.with_(pipeline=True)
    bfloat16 = SPE8.with_(policy="mixed_bfloat16")
    trials = [trial(SPE8, 3.4), trial(rebuilt, 3.3), trial(bfloat16, 3.0)]
    assert [setup for setup, _ in contenders(picks(trials, SPE8, BASE), BASE)] == [SPE8, rebuilt]

    # Where the pick has the policy, its float32 twin is the second rival.
    pick, pick_rebuilt = bfloat16, bfloat16.with_(pipeline=True)
    trials = [trial(pick, 3.4), trial(pick_rebuilt, 3.3), trial(SPE8, 3.0)]
    timed = contenders(picks(trials, pick, BASE), BASE)
    assert [setup for setup, _ in timed] == [pick, pick_rebuilt, SPE8]


@pytest.mark.parametrize(
    "next_best_seconds, chosen",
    [
        # A higher median (5x against 4x) that loses to the pick in 2 rounds of 5: the pick.
        ([0.2, 0.4, 0.2, 0.4, 0.2], SPE8),
        # Faster than the pick in every round: the next-best.
        ([0.2] * 5, SPE4),
    ],
)
def test_the_next_best_replaces_a_faster_pick_only_where_it_beats_it_round_by_round(
    next_best_seconds, chosen
):
    fake = Fake({BASE: [1.0], SPE8: [0.25, 0.33, 0.25, 0.33, 0.25], SPE4: next_best_seconds})
    found = confirm(
        fake.runner_for, BASE, [(SPE8, "8"), (SPE4, "4")], rounds=5, clock=lambda: 0.0, work="w"
    )
    assert found.pick == SPE8 and found.setup == chosen


def test_the_pick_confirmed_gives_its_figure_and_no_outcome_line():
    fake = Fake({BASE: [1.0], SPE8: [0.25]})
    found = confirm(fake.runner_for, BASE, [(SPE8, "spe=8")], rounds=5, clock=lambda: 0.0, work="w")

    assert (found.setup, found.pick, found.ratio, found.rounds_won) == (SPE8, SPE8, 4.0, 5)
    assert found.outcome == "" and found.work == "w"
    assert fake.started == [BASE, SPE8] and fake.closed == 2


def test_a_pick_not_faster_falls_back_once_then_the_baseline_is_kept():
    # The pick ties the baseline; the next-best fails; a third is never tried (one fallback).
    fake = Fake({BASE: [1.0], SPE8: [1.0], SPE4: [0.5], XLA: [0.1]}, fail={SPE4})
    candidates = [(SPE8, "spe=8"), (SPE4, "spe=4"), (XLA, "xla")]
    found = confirm(fake.runner_for, BASE, candidates, rounds=5, clock=lambda: 0.0, work="w")

    assert found.setup == BASE and found.pick == SPE8 and found.ratio == 1.0
    assert found.ratio_low is None
    assert found.outcome == (
        "confirmation: the search's pick, spe=8, was 1.00x [1.00-1.00] (median of 5 rounds, 94% "
        "interval), 0 of 5 rounds won, not shown faster; the next-best, spe=4, failed (out of "
        "memory): the "
        "baseline is kept"
    )
    assert fake.started == [BASE, SPE8, SPE4] and fake.closed == 2  # the failed one never ran


def test_a_baseline_that_fails_by_the_users_work_keeps_the_baseline_and_says_why():
    fake = Fake({SPE8: [0.1]}, fail={BASE})
    found = confirm(fake.runner_for, BASE, [(SPE8, "spe=8")], rounds=5, clock=lambda: 0.0, work="w")

    assert found.setup == BASE
    assert (
        found.outcome
        == "confirmation: the baseline failed by w (out of memory): the baseline is kept"
    )


def test_a_scattering_pick_is_not_confirmed_on_a_steady_baseline():
    # A 1.11x median, but its own runs scatter round after round: 2 rounds in 5 lost.
    fake = Fake({BASE: [1.0], SPE8: [0.8, 1.1, 0.9, 0.7, 1.05] * 2})
    found = confirm(fake.runner_for, BASE, [(SPE8, "spe=8")], rounds=5, clock=lambda: 0.0, work="w")

    assert found.setup == BASE and "1.11x [0.91-1.43]" in found.outcome
    # 2 of its 5 ratios are below 1 + MIN_GAIN; at the cap of 10 rounds the low end is the 2nd
    # lowest, so no round could make it faster: the rounds stop at 5, and the line says so.
    assert "(median of 5 rounds, 94% interval)" in found.outcome
    assert found.outcome.endswith("not shown faster: the baseline is kept")


def test_the_work_is_whole_where_it_fits_the_share_else_its_first_steps():
    assert run_examples(1000.0, 80.0, 5) == pytest.approx(1000.0)
    x = np.zeros((1000, 4), "float32")
    data = training_data((x, x[:, :1]), 32)  # 32 batches, the last of 8 examples

    whole = epoch_plan(data, 32, 32, None, 1e9, 8)
    assert (whole.steps, whole.whole, whole.examples) == (32, True, 1000)
    assert whole.work(callbacks=True) == "whole fit epochs (32 steps, callbacks included)"
    cut = epoch_plan(data, 32, 32, None, 500, 8)  # 15 batches fit: 8, a multiple of 8
    assert (cut.steps, cut.whole, cut.examples) == (8, False, 256)
    assert cut.work(callbacks=False) == "the first 8 of each fit epoch's 32 steps"
    told = epoch_plan(data, 32, 32, 16, 1e9, 8)  # the user's steps_per_epoch
    assert (told.steps, told.whole) == (16, True)


def test_predict_calls_hold_the_data_as_given_or_its_first_examples():
    x = np.arange(1000, dtype="float32").reshape(1000, 1)
    data = inference_data(x, 32)

    feed, whole = data.whole_feed(32, 1e9)
    assert whole and feed["x"] is x and feed["batch_size"] == 32
    feed, whole = data.whole_feed(128, 256)
    assert not whole and len(feed["x"]) == 256 and feed["batch_size"] == 128


@pytest.mark.tensorflow
def test_a_dataset_of_unknown_length_is_timed_by_steps_and_never_runs_out():
    import tensorflow as tf

    x = np.zeros((64, 4), "float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(8).filter(lambda a, b: True)
    data = training_data(dataset, None)  # tf.data cannot tell a filter's length

    plan = epoch_plan(data, None, 8, None, 160, 4)
    assert (plan.steps, plan.whole, plan.length) == (20, False, None)
    assert plan.work(callbacks=False) == "fit epochs of 20 steps (the data's end is not known)"
    feed, _ = epoch_feed(data, TuneSetup(1, False, "float32"), plan, None, None)
    assert feed["steps_per_epoch"] == 20
    assert len(list(feed["x"].take(20))) == 20  # 8 batches as given, repeated


def test_the_next_best_is_chosen_when_the_users_work_finds_it_faster_than_the_pick():
    # The pick (spe=8) gains 1.5x by whole runs; the next-best (spe=4) 2x in the same rounds.
    fake = Fake({BASE: [1.0], SPE8: [1 / 1.5], SPE4: [0.5]})
    candidates = [(SPE8, "spe=8"), (SPE4, "spe=4")]
    found = confirm(fake.runner_for, BASE, candidates, rounds=5, clock=lambda: 0.0, work="w")

    assert (found.setup, found.pick, found.label, found.ratio) == (SPE4, SPE8, "spe=4", 2.0)
    assert found.outcome == (
        "confirmation: the search's pick, spe=8, was 1.50x [1.50-1.50] (median of 5 rounds, 94% "
        "interval), 5 of 5 rounds won; the next-best, spe=4, was 2.00x [2.00-2.00] (median of 5 "
        "rounds, 94% interval), 5 of 5 rounds won: spe=4 is chosen"
    )
    assert fake.started == [BASE, SPE8, SPE4] and fake.closed == 3


def test_the_pick_stays_when_it_beats_the_next_best_and_says_nothing():
    fake = Fake({BASE: [1.0], SPE8: [0.25], SPE4: [0.5]})
    candidates = [(SPE8, "spe=8"), (SPE4, "spe=4")]
    found = confirm(fake.runner_for, BASE, candidates, rounds=5, clock=lambda: 0.0, work="w")

    assert (found.setup, found.ratio, found.outcome) == (SPE8, 4.0, "")


def test_a_contender_failing_in_its_rounds_is_dropped_and_the_other_still_judged():
    fake = Fake({BASE: [1.0], SPE4: [0.5]})
    failing = iter([0.25, 0.25])

    def runner_for(setup):
        if setup != SPE8:
            return fake.runner_for(setup)

        class Runner:  # two good runs, then out of memory
            def start(_):
                pass

            def rewarm(_):
                pass

            def run(_):
                try:
                    return next(failing)
                except StopIteration:
                    raise TrialFailed("out of memory") from None

            def close(_):
                fake.closed += 1

        return WholeRuns(Runner(), examples=100)

    candidates = [(SPE8, "spe=8"), (SPE4, "spe=4")]
    found = confirm(runner_for, BASE, candidates, rounds=5, clock=lambda: 0.0, work="w")

    assert (found.setup, found.ratio) == (SPE4, 2.0)
    assert "the search's pick, spe=8, failed (out of memory)" in found.outcome
    assert fake.closed == 3  # the baseline, both contenders
