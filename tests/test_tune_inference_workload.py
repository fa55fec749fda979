"""tuning/inference/workload.py, part by part on fake runners with known costs
(``tests/predict_costs.py``), so every figure is exact: the knobs' order, the baseline's timed
run, a candidate's batches, the judgement (the output check against the baseline, or exactly
against the setup ``steps_per_execution`` was added to; the latency limit), the
``steps_per_execution`` bound, the confirmation's work and the result's notes. Whole searches
on the same fakes are in ``tests/test_tune_inference.py`` (re-run there under other Keras
backends), the real ``predict`` path too.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from predict_costs import KnownCost, workload

from tfthroughput.tuning import OutputCheck
from tfthroughput.tuning.engine.confirmation import confirm
from tfthroughput.tuning.engine.contract import BestSoFar, Proposal
from tfthroughput.tuning.engine.measure import Comparison
from tfthroughput.tuning.engine.verdict import FAILED, FASTER, OUTPUTS_DIFFER, OVER_LATENCY
from tfthroughput.tuning.inference.predict_runner import LATENCY_SAMPLES
from tfthroughput.tuning.inference.workload import inference_knobs
from tfthroughput.tuning.knobs.batch import batch_knob
from tfthroughput.tuning.knobs.steps_per_execution import steps_per_execution_line
from tfthroughput.tuning.knobs.xla_and_policy import policy_knob, xla_knob
from tfthroughput.tuning.setup import TuneSetup

BASE = TuneSetup(1, False, "float32", batch_size=32)


def test_the_knobs_are_the_batch_xla_steps_per_execution_then_the_policy():
    assert inference_knobs() == (batch_knob, xla_knob, steps_per_execution_line, policy_knob)


class Grouped(KnownCost):
    """Known costs, for a model as given that was compiled with ``steps_per_execution=4``."""

    def runner(self, setup, build_model, data, *, steps, **rest):
        given = TuneSetup(4, False, "float32", batch_size=data.batch_size)
        return super().runner(setup or given, build_model, data, steps=steps, **rest)


def test_the_baseline_runs_at_least_four_batches_lengthened_to_a_quarter_second():
    # 0.2 s a batch: 2 batches (already 0.4 s) raised to the fewest, 4.
    slow = workload(KnownCost(0.2, 1e-6), steps=2, limit=150.0)
    runner = slow.baseline()
    assert runner.steps == 4 and slow.examples_per_run == 4 * 32
    mode = slow.mode
    assert mode.line_ends == frozenset({FAILED, OUTPUTS_DIFFER, OVER_LATENCY})
    assert (mode.most_batch_factor, mode.latency_limit_ms) == (128, 150.0)
    # The baseline's p95 is sampled when asked: one round of single-batch calls.
    assert mode.baseline_p95_ms() == pytest.approx(200.032)
    assert len(runner.latencies) == LATENCY_SAMPLES
    # A model compiled with steps_per_execution=4 (0.2 s a batch): two whole executions.
    grouped = workload(Grouped(0.8, 1e-6), steps=2)
    assert grouped.baseline().steps == 8 and grouped.examples_per_run == 8 * 32

    # 1.032 ms a batch: 128 batches (0.13 s) doubled once, to 256 (0.26 s).
    fast = workload(KnownCost(1e-3, 1e-6))
    assert fast.baseline().steps == 256 and fast.examples_per_run == 256 * 32


class Recording(KnownCost):
    """Known costs, and the warm-up steps of the last runner made."""

    def runner(self, setup, build_model, data, *, steps, warmup_steps, **rest):
        self.warmup_steps = warmup_steps
        return super().runner(
            setup, build_model, data, steps=steps, warmup_steps=warmup_steps, **rest
        )


def test_a_candidate_times_the_baseline_examples_after_one_untimed_execution():
    cost = Recording(1e-3, 1e-6)
    made = workload(cost)

    def proposed(setup, base_steps=32):
        """The runner made for ``setup`` after a baseline of ``base_steps`` batches of 32."""
        made.examples_per_run = base_steps * 32
        view = SimpleNamespace(base_runner=SimpleNamespace(setup=BASE, steps=base_steps))
        runner = made.candidate(view, Proposal(setup))
        assert runner.setup == setup
        return runner.steps, cost.warmup_steps

    # 1,024 examples a run: 16 batches of 64 after a first execution of 1.
    assert proposed(BASE.with_(batch_size=64)) == (17, 2)
    # 8 batches of 128 (two executions of 4) after a first of 4; warm-up: 2 executions.
    assert proposed(BASE.with_(steps_per_execution=4, batch_size=128)) == (12, 8)
    # One batch of 1,024 holds the run, but two executions of 8 are the fewest timed.
    assert proposed(BASE.with_(steps_per_execution=8, batch_size=1024)) == (24, 16)
    # 16 batches rounded up to whole executions of 3: 18, after a first of 3.
    assert proposed(BASE.with_(steps_per_execution=3, batch_size=64)) == (21, 6)
    # A batched dataset (no batch size): the baseline's batches.
    assert proposed(BASE.with_(batch_size=None), base_steps=10) == (11, 2)


def test_timed_batches_hold_the_baseline_examples_at_the_setup_batch():
    made = workload(KnownCost(1e-3, 1e-6))
    made.examples_per_run = 1024
    base = SimpleNamespace(setup=BASE, steps=32)
    assert made.timed_batches(base, BASE.with_(batch_size=128)) == 8
    assert made.timed_batches(base, BASE.with_(batch_size=100)) == 10  # whole batches only
    assert made.timed_batches(base, BASE.with_(batch_size=4096)) == 1  # never none
    batched = SimpleNamespace(setup=BASE.with_(batch_size=None), steps=12)
    assert made.timed_batches(batched, BASE.with_(batch_size=128)) == 12


def faster(ratio=2.0):
    """A comparison the paired rule finds faster: ``ratio`` in each of 5 rounds."""
    return Comparison(
        1000.0 * ratio,
        1000.0,
        ratio,
        ratio,
        ratio,
        0.0,
        baseline_speeds=(1000.0,) * 5,
        speeds=(1000.0 * ratio,) * 5,
        rounds_won=5,
        rounds=5,
    )


def judged(made, setup, outputs, *, best=BASE, best_outputs=None, latency=0.5e-3):
    base_runner = made.runner(None, steps=8, warmup_steps=2)
    base_runner.start()
    runner = made.runner(setup, steps=8, warmup_steps=2)
    runner.start()
    runner.outputs = outputs
    runner.latencies = [latency] * LATENCY_SAMPLES
    reference = base_runner.outputs if best_outputs is None else best_outputs
    view = SimpleNamespace(
        base=BASE, base_runner=base_runner, best=BestSoFar(best, reference=reference)
    )
    return made.judge(view, Proposal(setup, "the label"), runner, faster())


OUTPUTS = np.linspace(-1.0, 1.0, 64)


def test_steps_per_execution_added_to_the_best_must_match_the_best_exactly():
    made = workload(KnownCost(1e-3, 1e-6))
    best = BASE.with_(batch_size=64)
    on_best = best.with_(steps_per_execution=4)
    # The best's outputs are 1 % off the baseline's (within the tolerance): matched exactly.
    trial = judged(made, on_best, OUTPUTS + 0.01, best=best, best_outputs=OUTPUTS + 0.01)
    assert trial.output_check == OutputCheck(0.0, 0.0, True, 1e-6, 64)
    assert (trial.status, trial.label, trial.ratio) == (FASTER, "the label", 2.0)
    trial = judged(made, on_best, OUTPUTS + 0.01 + 1e-5, best=best, best_outputs=OUTPUTS + 0.01)
    assert trial.status == OUTPUTS_DIFFER and trial.output_check.same_arithmetic


def test_other_setups_are_checked_against_the_baseline_within_their_tolerance():
    made = workload(KnownCost(1e-3, 1e-6), tolerance=0.02)
    # A larger batch changes the arithmetic: 1 % off passes the 2 % tolerance.
    trial = judged(made, BASE.with_(batch_size=128), OUTPUTS + 0.01)
    check = trial.output_check
    assert (check.same_arithmetic, check.tolerance, trial.status) == (False, 0.02, FASTER)
    assert check.max_abs_difference == pytest.approx(0.01)
    # With steps_per_execution too: still more than steps_per_execution added to the best.
    trial = judged(made, BASE.with_(steps_per_execution=2, batch_size=128), OUTPUTS + 0.01)
    assert (trial.output_check.tolerance, trial.status) == (0.02, FASTER)
    # steps_per_execution off the best (XLA on here, its outputs 0.5 off) keeps the
    # baseline's arithmetic: checked exactly against the baseline.
    xla_best, xla_outputs = BASE.with_(jit_compile=True), OUTPUTS + 0.5
    spe = BASE.with_(steps_per_execution=2)
    trial = judged(made, spe, OUTPUTS, best=xla_best, best_outputs=xla_outputs)
    assert trial.output_check == OutputCheck(0.0, 0.0, True, 1e-6, 64)
    assert trial.status == FASTER
    trial = judged(made, spe, OUTPUTS + 1e-5, best=xla_best, best_outputs=xla_outputs)
    assert trial.status == OUTPUTS_DIFFER


def test_a_trial_over_the_latency_limit_is_not_chosen_but_outputs_come_first():
    made = workload(KnownCost(1e-3, 1e-6), limit=1.0)
    big = BASE.with_(batch_size=128)
    trial = judged(made, big, OUTPUTS, latency=1.5e-3)
    assert trial.status == OVER_LATENCY and trial.latency_p95_ms == pytest.approx(1.5)
    assert judged(made, big, OUTPUTS, latency=1.0e-3).status == FASTER  # at the limit: within
    assert judged(made, big, OUTPUTS + 1.0, latency=1.5e-3).status == OUTPUTS_DIFFER
    unlimited = workload(KnownCost(1e-3, 1e-6))
    assert judged(unlimited, big, OUTPUTS, latency=1.0).status == FASTER


def test_steps_per_execution_goes_up_to_one_predict_call_on_the_arrays():
    made = workload(KnownCost(1e-3, 1e-6), examples=160)
    runner = made.baseline()
    bound = made.mode.steps_per_execution_bound
    assert bound(BASE) == (
        8,
        "steps_per_execution above 1 not tried: one predict call on the 160 examples is 5 "
        "batches of 32",
    )
    assert bound(BASE.with_(batch_size=256)) == (
        1,
        "steps_per_execution above 1 not tried: one predict call on the 160 examples is 1 "
        "batch of 256",
    )
    assert bound(BASE.with_(batch_size=30))[0] == 8  # 6 batches: the next power of two
    # No batch size (a batched dataset): half the baseline's timed batches, no reason given.
    assert runner.steps == 256 and bound(BASE.with_(batch_size=None)) == (128, "")
    # The reason names the model's own steps_per_execution.
    grouped = workload(Grouped(1e-3, 1e-6), examples=160)
    grouped.baseline()
    assert grouped.mode.steps_per_execution_bound(BASE)[1].startswith(
        "steps_per_execution above 4 not tried: one predict call on the 160 examples is 5 "
    )


def confirmed(made, view, candidates, most):
    """The confirmation as the search runs it: the workload's plan, timed, finished."""
    plan = made.confirmation(view, candidates, most)
    rounds = made.settings.confirm_rounds
    timed = confirm(
        plan.runner_for, view.base, candidates, rounds=rounds, clock=made.clock, work=plan.work
    )
    return plan.finish(timed)


def test_the_confirmation_times_whole_calls_or_says_what_part_it_timed():
    cost = KnownCost(1e-3, 1e-6)
    big = BASE.with_(batch_size=64)
    made = workload(cost, confirm_rounds=5)
    made.baseline()
    view = SimpleNamespace(base=BASE)

    part = confirmed(made, view, [(big, "batch_size=64")], most=300.0)
    # 288 examples (9 whole batches of 32): 9 ms + 0.288 ms against 5 ms + 0.288 ms at 64.
    assert part.work == "predict calls on the first 288 examples of 1,024 (set-up included)"
    assert part.setup == big and part.ratio == pytest.approx(9.288 / 5.288)
    assert part.rounds == 5 and part.rounds_won == 5
    # A batch larger than the part predicts one whole batch; the work names the baseline's.
    huge = BASE.with_(batch_size=512)
    part = confirmed(made, view, [(huge, "batch_size=512")], most=300.0)
    assert part.work == "predict calls on the first 288 examples of 1,024 (set-up included)"
    assert part.ratio == pytest.approx((512 / 1.512) / (288 / 9.288))

    whole = confirmed(made, view, [(big, "batch_size=64")], most=1e9)
    assert (
        whole.work == "whole predict calls on the data as given (1,024 examples, set-up included)"
    )
    assert whole.ratio == pytest.approx((32 * 1e-3 + 1.024e-3) / (16 * 1e-3 + 1.024e-3))


def test_the_result_notes_what_the_chosen_batch_and_policy_change():
    made = workload(KnownCost(1e-3, 1e-6), limit=2.5)
    chosen = BASE.with_(batch_size=256, policy="mixed_bfloat16")
    fields = {
        "baseline": BASE,
        "chosen": chosen,
        "trials": (),
        "seconds": 1.0,
        "time_budget": 60.0,
        "notes": ("a search note",),
    }
    result = made.result(**fields)
    assert result.max_batch_latency_ms == 2.5
    assert result.notes == (
        "a search note",
        "predict with batch_size=256 (from 32): each batch waits for more examples, so a server "
        "that batches requests adds that wait to their latency",
        "build the model under mixed_precision('mixed_bfloat16')",
    )
    assert made.result(**{**fields, "chosen": BASE}).notes == ("a search note",)
