"""The confirmation's piece of training work (tuning/training/whole_epochs.py): which epoch is
timed at a batch size, how the table names it, and what ``fit`` is given for it."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tfthroughput.tuning.setup import TuneSetup  # noqa: E402
from tfthroughput.tuning.training import pipeline as rebuilding  # noqa: E402
from tfthroughput.tuning.training.data import training_data  # noqa: E402
from tfthroughput.tuning.training.whole_epochs import (  # noqa: E402
    EpochPlan,
    epoch_feed,
    epoch_length,
    epoch_plan,
)

_AT_8 = TuneSetup(steps_per_execution=1, jit_compile=False, policy="float32", batch_size=8)


def _arrays(examples: int):
    x = np.arange(examples * 2, dtype="float32").reshape(examples, 2)
    return training_data((x, x[:, :1]), 8)


def test_an_epoch_that_fits_the_budget_is_timed_whole():
    data = _arrays(100)  # 13 steps of 8, the last of 4 examples
    plan = epoch_plan(data, 8, 8, None, max_examples=1000, multiple=4)
    assert plan == EpochPlan(steps=13, whole=True, length=13, examples=100)
    assert plan.work(callbacks=False) == "whole fit epochs (13 steps)"
    assert plan.work(callbacks=True) == "whole fit epochs (13 steps, callbacks included)"


def test_a_longer_epoch_is_timed_over_its_first_steps_a_multiple_of_every_execution():
    data = _arrays(1000)  # 125 steps of 8
    # 200 examples allow 25 steps: rounded down to 24, whole executions of 8 steps.
    plan = epoch_plan(data, 8, 8, None, max_examples=200, multiple=8)
    assert plan == EpochPlan(steps=24, whole=False, length=125, examples=192)
    assert plan.work(callbacks=False) == "the first 24 of each fit epoch's 125 steps"
    # Never less than one execution, however small the budget.
    assert epoch_plan(data, 8, 8, None, max_examples=10, multiple=16).steps == 16


def test_the_users_steps_per_epoch_is_the_epoch():
    data = _arrays(1000)
    assert epoch_length(data, 8, 40) == 40
    plan = epoch_plan(data, 8, 8, 40, max_examples=1000, multiple=4)
    assert (plan.steps, plan.whole, plan.length) == (40, True, 40)


def test_an_endless_input_is_timed_by_steps_and_said_so():
    endless = training_data(
        tf.data.Dataset.from_tensors((np.ones((8, 2)), np.ones((8, 1)))).repeat(), None
    )
    plan = epoch_plan(endless, None, 8, None, max_examples=160, multiple=4)
    assert (plan.steps, plan.whole, plan.length) == (20, False, None)
    assert plan.work(callbacks=False) == "fit epochs of 20 steps (the data's end is not known)"


def test_a_whole_epoch_of_arrays_is_fed_as_the_user_feeds_it_and_told_nothing():
    data = _arrays(100)
    plan = epoch_plan(data, 8, 8, None, max_examples=1000, multiple=1)
    feed, warm = epoch_feed(data, _AT_8, plan, None, None)
    assert warm is None
    assert feed["steps_per_epoch"] is None  # fit runs to the arrays' end, as the user's does
    assert feed["batch_size"] == 8 and len(feed["x"]) == 100


def test_a_shortened_epoch_is_told_its_steps():
    data = _arrays(1000)
    plan = epoch_plan(data, 8, 8, None, max_examples=200, multiple=8)
    feed, _ = epoch_feed(data, _AT_8, plan, None, None)
    assert feed["steps_per_epoch"] == 24


def test_a_rebuilt_pipeline_repeats_so_its_epoch_is_told_and_its_cache_filled_first():
    data = _arrays(100)
    plan = epoch_plan(data, 8, 8, None, max_examples=1000, multiple=1)
    feed, warm = epoch_feed(data, _AT_8.with_(pipeline=True), plan, rebuilding.plan(data), None)
    assert feed["steps_per_epoch"] == 13 and feed["shuffle"] is False
    assert warm is not None  # arrays are finite and fixed: cached, filled before timing
    warm()
    # The epoch is the user's 13 steps, of full batches: the pipeline repeats before it
    # batches, so the partial batch of a pass is filled from the next one.
    firsts = np.concatenate([x[:, 0] for x, _ in feed["x"].take(13)])
    assert len(firsts) == 104
    assert sorted(set(firsts.tolist())) == list(range(0, 200, 2))  # every example once a pass
