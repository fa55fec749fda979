"""TuneSetup (tuning/setup.py): a frozen record of one trial's knobs, the words that say what
it changes from the baseline, the ``compile`` arguments, and ``apply`` on a compiled model.
The table and the snippet built from it: tests/test_tune_result.py."""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import pytest
from fakes import CostClock, charge_calls

from tfthroughput.tuning.setup import TuneSetup

BASE = TuneSetup(1, False, "float32", batch_size=16)


def compiled_model() -> keras.Model:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def test_defaults_are_the_input_as_given():
    setup = TuneSetup(4, True, "mixed_bfloat16")
    assert (setup.pipeline, setup.batch_size, setup.augment_on_device) == (False, None, False)


def test_with_is_a_changed_copy_and_the_setup_is_frozen():
    wider = BASE.with_(batch_size=64, jit_compile=True)
    assert wider == TuneSetup(1, True, "float32", batch_size=64)
    assert BASE == TuneSetup(1, False, "float32", batch_size=16)  # unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        BASE.batch_size = 32
    with pytest.raises(TypeError, match="unroll"):
        BASE.with_(unroll=2)


def test_changes_from_names_every_changed_knob_in_order():
    every = TuneSetup(
        8, True, "mixed_bfloat16", pipeline=True, batch_size=64, augment_on_device=True
    )
    assert every.changes_from(BASE) == (
        "steps_per_execution=8, XLA on, policy=mixed_bfloat16, pipeline rebuilt, batch_size=64, "
        "augmentation in the training step"
    )
    # Back to the baseline from it: XLA turned off; the pipeline and augmentation words say
    # only that they differ.
    assert BASE.changes_from(every) == (
        "steps_per_execution=1, XLA off, policy=float32, pipeline rebuilt, batch_size=16, "
        "augmentation in the training step"
    )
    assert BASE.changes_from(BASE) == "as given"
    assert BASE.with_(batch_size=None).changes_from(BASE) == "batch_size=None"


def test_compile_kwargs_are_the_two_compile_arguments():
    setup = BASE.with_(steps_per_execution=32, jit_compile=True, policy="mixed_float16")
    assert setup.compile_kwargs == {"steps_per_execution": 32, "jit_compile": True}


def test_apply_sets_the_knobs_and_the_next_fit_runs_whole_executions_of_them():
    clock = CostClock()
    model = charge_calls(compiled_model(), clock, launch=1.0, per_step=0.0)
    x, y = np.ones((32, 4), "float32"), np.ones((32, 1), "float32")
    model.fit(x, y, batch_size=4, steps_per_epoch=8, verbose=0)
    assert clock() == 8.0  # one call a step
    loss, optimizer = model.loss, model.optimizer

    assert TuneSetup(4, False, "float32").apply(model) is model
    assert (model.steps_per_execution, model.jit_compile) == (4, False)
    # The compiled functions are dropped, so the next fit builds them with the new knobs.
    assert model.train_function is model.test_function is model.predict_function is None
    model.fit(x, y, batch_size=4, steps_per_epoch=8, verbose=0)
    assert clock() == 8.0 + 2.0  # two calls of four steps
    assert model.loss is loss and model.optimizer is optimizer
    assert int(optimizer.iterations) == 16
    TuneSetup(4, True, "float32").apply(model)
    assert model.jit_compile is True and model.train_function is None


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(
            lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)]), id="uncompiled"
        ),
        pytest.param(lambda: "model", id="not-a-model"),
    ],
)
def test_apply_refuses_anything_but_a_compiled_model(model):
    given = model()
    with pytest.raises(
        TypeError, match=r"`model` must be a compiled keras\.Model\. Received: model="
    ):
        BASE.apply(given)
