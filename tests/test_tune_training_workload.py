"""Training's workload for tune's search (tuning/training/workload.py): the knobs in order, the
baseline (its steps in whole executions, its timed run lengthened on an injected clock), each
candidate's runner (a larger batch runs fewer steps), the judgement of a trial and what the
result says of the chosen setup. The engine is not run: its view is given by hand. Whole
searches: tests/test_tuner.py; the arithmetic rule: tests/test_tuner.py too."""

from __future__ import annotations

from types import SimpleNamespace

import keras
import numpy as np
import pytest
from fakes import CostClock, charge_calls
from knob_driving import judged
from tiny_models import float32_policy  # noqa: F401 - fixture

from tfthroughput.tuning.engine.contract import BestSoFar, Proposal, SearchView
from tfthroughput.tuning.engine.measure import Comparison
from tfthroughput.tuning.engine.verdict import FAILED, FASTER, PROBE, REJECTED
from tfthroughput.tuning.result import TuneTrial
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training.data import training_data
from tfthroughput.tuning.training.workload import TrainingSettings, TrainingWorkload, training_knobs

LAUNCH, PER_STEP = 0.01, 0.001  # seconds a train-function call costs, and each of its steps
X = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
Y = X.sum(axis=1, keepdims=True)
BASE = TuneSetup(1, False, "float32", batch_size=8)


pytestmark = pytest.mark.usefixtures("float32_policy")


def settings(**changes) -> TrainingSettings:
    given = dict(steps=8, rounds=3, time_budget=60.0, seed=0, max_steps_per_execution=8)
    given.update(policy=None, try_xla=False, notes=(), loss_tolerance=0.05)
    given.update(try_pipeline=False, allow_batch_change=False)
    return TrainingSettings(**{**given, **changes})


def workload(clock, *, spe=1, data=(X, Y), batch_size=8, **changes) -> TrainingWorkload:
    """The workload of a linear model that never learns (SGD at rate 0: every trial's warm-up
    loss is the mean loss of the examples it saw), its calls charged to ``clock``."""

    def build():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.0), "mse", steps_per_execution=spe)
        return charge_calls(model, clock, launch=LAUNCH, per_step=PER_STEP)

    return TrainingWorkload(build, training_data(data, batch_size), settings(**changes), clock)


def view_of(work: TrainingWorkload, base_runner) -> SearchView:
    """The view a search with this baseline gives (its best: the baseline)."""
    search = SimpleNamespace(
        base=base_runner,
        best=BestSoFar(base_runner.setup),
        settings=work.settings,
        workload=work,
        notes=[],
    )
    return SearchView(search)


def faster_twice() -> Comparison:
    return Comparison(
        examples_per_second=200.0,
        baseline_examples_per_second=100.0,
        ratio=2.0,
        ratio_low=2.0,
        ratio_high=2.0,
        noise=0.0,
        baseline_speeds=(100.0,) * 5,
        speeds=(200.0,) * 5,
        rounds_won=5,
        rounds=5,
    )


def test_the_knobs_in_the_order_the_settings_allow():
    names = lambda **changes: [knob.__name__ for knob in training_knobs(settings(**changes))]  # noqa: E731
    line = ["steps_per_execution_line", "xla_around_the_best", "policy_knob_then_line"]
    assert names() == line
    assert names(allow_batch_change=True) == [*line, "batch_knob"]
    assert names(try_pipeline=True, allow_batch_change=True) == [
        "pipeline_knob",
        *line,
        "batch_knob",
        "pipeline_on_best_knob_then_line",
    ]


def test_the_baseline_runs_whole_executions_and_its_timed_run_is_lengthened():
    clock = CostClock()
    work = workload(clock, spe=3, epoch_steps=24)
    runner = work.baseline()
    # 8 steps asked, in whole executions of 3 doubled: 12. Its timed run doubled until it lasts
    # 0.1 s: 12 steps cost 4 x 13 ms, 24 steps 8 x 13 ms.
    assert (work.steps, work.timed_steps, runner.steps) == (12, 24, 24)
    assert runner.setup == TuneSetup(3, False, "float32", batch_size=8)
    assert runner.solo_speed == pytest.approx(24 * 8 / (8 * (LAUNCH + 3 * PER_STEP)))
    assert work.replay is not None and runner.notes == []  # arrays: their batches replayed
    mode = work.mode
    assert mode.steps_per_execution_bound(BASE) == (12, "")
    assert (mode.epoch_steps, mode.most_batch_factor, mode.line_ends) == (24, 4, {FAILED})
    assert mode.data is work.data
    runner.close()


def test_an_input_that_cannot_be_replayed_is_said_so():
    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            return X[index * 8 : (index + 1) * 8], Y[index * 8 : (index + 1) * 8]

    work = workload(CostClock(), data=Batches(), batch_size=None)
    runner = work.baseline()
    assert work.replay is None
    assert runner.notes[0].startswith("loss checked on each trial's own pass of the input: ")
    assert work.examples_per_step(None) == 8  # the first batch's examples
    runner.close()


def test_a_larger_batch_runs_proportionally_fewer_steps_in_whole_executions():
    work = workload(CostClock())
    base = work.baseline()  # 8 steps warmed up, 16 timed (8 x 11 ms < 0.1 s)
    view = view_of(work, base)
    assert (work.steps, work.timed_steps) == (8, 16)
    same_batch = work.candidate(view, Proposal(BASE.with_(steps_per_execution=4)))
    assert (same_batch.warmup_steps, same_batch.steps, same_batch.examples_per_step) == (8, 16, 8)
    four_times = work.candidate(view, Proposal(BASE.with_(batch_size=32)))
    assert (four_times.warmup_steps, four_times.steps, four_times.examples_per_step) == (2, 4, 32)
    whole = work.candidate(view, Proposal(BASE.with_(batch_size=32, steps_per_execution=4)))
    assert (whole.warmup_steps, whole.steps) == (4, 4)
    assert same_batch.model is None  # not started: the search starts it
    base.close()


def test_a_trial_is_judged_by_its_speed_and_its_loss_against_the_baselines():
    work = workload(CostClock())
    base = work.baseline()
    view = view_of(work, base)
    more_steps = Proposal(BASE.with_(steps_per_execution=4), "steps_per_execution=4")
    runner = work.candidate(view, more_steps)
    runner.start()
    trial = judged(work.judge(view, more_steps, runner, faster_twice()))
    assert isinstance(trial, TuneTrial) and trial.status == FASTER
    assert (trial.label, trial.ratio, trial.rounds, trial.reason) == (
        "steps_per_execution=4",
        2.0,
        5,
        "",
    )
    check = trial.loss_check
    assert (check.same_arithmetic, check.basis, check.tolerance, check.passed) == (
        True,
        "replayed",
        1e-5,
        True,
    )
    runner.close()
    # A larger batch: its own pass of the input, held to loss_tolerance, and told that it
    # changes the learning dynamics (the same 64 examples: the same mean loss at rate 0).
    wider = Proposal(BASE.with_(batch_size=32), "batch_size=32")
    runner = work.candidate(view, wider)
    runner.start()
    trial = judged(work.judge(view, wider, runner, faster_twice()))
    assert trial.status == FASTER
    assert trial.reason == "learning dynamics change (fewer, larger steps per epoch)"
    check = trial.loss_check
    assert (check.same_arithmetic, check.basis, check.tolerance) == (False, "own pass", 0.05)
    assert check.relative_difference < 1e-6
    runner.close()
    base.close()


def test_a_faster_trial_whose_loss_diverges_is_rejected():
    work = workload(CostClock(), loss_tolerance=1e-6)
    base = work.baseline()
    view = view_of(work, base)
    bfloat16 = Proposal(BASE.with_(policy="mixed_bfloat16"), "policy=mixed_bfloat16")
    runner = work.candidate(view, bfloat16)
    runner.start()
    trial = judged(work.judge(view, bfloat16, runner, faster_twice()))
    assert (trial.status, trial.ratio) == (REJECTED, 2.0)
    check = trial.loss_check
    assert not check.same_arithmetic and check.tolerance == 1e-6
    assert check.relative_difference > 1e-6 and not check.passed  # bfloat16's rounding
    runner.close()
    base.close()


def test_the_probe_is_the_baselines_own_model_and_never_judged():
    work = workload(CostClock())
    base = work.baseline()
    view = view_of(work, base)
    probe = Proposal(BASE, "compute only", probe=True)
    runner = work.candidate(view, probe)
    assert runner.steps == work.timed_steps
    runner.start()
    assert runner.model is base.model
    trial = judged(work.judge(view, probe, runner, faster_twice()))
    assert (trial.status, trial.loss_check, trial.memory_mib) == (PROBE, None, None)
    runner.close()
    base.close()


def test_the_result_tells_what_the_chosen_setup_changes_for_the_user():
    pytest.importorskip("tensorflow")  # the pipeline's plan
    work = workload(CostClock())
    given = TuneSetup(4, False, "float32", batch_size=8)
    chosen = TuneSetup(16, True, "mixed_bfloat16", True, 32, augment_on_device=True)
    fields = dict(trials=(), seconds=1.0, time_budget=60.0, notes=("search note",))
    assert work.plan is None
    plan = work.pipeline_plan()
    assert work.pipeline_plan() is plan  # made once
    result = work.result(baseline=given, chosen=chosen, **fields)
    assert result.notes[0] == "search note"
    assert result.notes[1].startswith(
        "the chosen batch size (32, from 8) changes the learning dynamics: fewer optimizer steps"
    )
    assert result.notes[2:4] == (
        "build the model under mixed_precision('mixed_bfloat16')",
        'build the pipeline with augment_on="device" and fit '
        "tfthroughput.data.DeviceAugmented(model, dataset); save the model itself",
    )
    assert result.notes[4].startswith(
        "Keras runs whole executions: with steps_per_execution=16, keep fit's steps_per_epoch "
        "a multiple of 16"
    )
    assert result.pipeline_kwargs == {
        "batch_size": 8,
        "cache": True,
        "deterministic": True,
        "repeat": True,
        "shuffle_buffer": 64,
    }
    # Fewer steps per execution than given, and the input as given: nothing to say or build.
    fewer = work.result(baseline=given, chosen=given.with_(steps_per_execution=1), **fields)
    assert (fewer.notes, fewer.pipeline_kwargs) == (("search note",), None)
