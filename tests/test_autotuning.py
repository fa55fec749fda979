"""autotune(): the next fit tuned on a rebuilt copy of its model, then run with the chosen
setup; real fits in this process, every assertion independent of what the timings chose."""

from __future__ import annotations

import re

import numpy as np
import pytest

keras = pytest.importorskip("keras")

import tfthroughput  # noqa: E402
from tfthroughput import MonitoringWarning  # noqa: E402
from tfthroughput.monitor import keras_patch  # noqa: E402

QUICK = {
    "time_budget": 30,
    "steps": 32,
    "rounds": 2,
    "xla": False,
    "precision": False,
    "pipeline": False,
    "max_steps_per_execution": 4,
}


@pytest.fixture(autouse=True)
def nothing_left_patched():
    yield
    tfthroughput.autotune(disable=True)
    tfthroughput.autolog(disable=True)
    assert not keras_patch.is_patched()


def launch_bound_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def arrays():
    x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
    return x, x[:, :1]


@pytest.mark.tensorflow
def test_the_next_fit_is_tuned_then_trained_with_the_setup_it_printed(capsys):
    model = launch_bound_model()
    initial = [w.copy() for w in model.get_weights()]
    np.random.seed(5)
    tfthroughput.autotune(**QUICK)
    history = model.fit(*arrays(), batch_size=8, epochs=2, verbose=0)
    after_fit = np.random.random()
    out = capsys.readouterr().out
    assert "as given: steps_per_execution=1, XLA off, float32, batch 8" in out
    applied = re.search(r"model\.compile\(\.\.\., steps_per_execution=(\d+)", out)
    chosen = int(applied.group(1)) if applied else 1
    assert model.steps_per_execution == chosen, out
    if applied is None:
        assert "the setup as given was the fastest found" in out
    # The user's own fit ran its epochs from the model's own initial weights, and the search
    # left Python's and NumPy's random state as the fit found it.
    assert len(history.history["loss"]) == 2
    assert not all(np.array_equal(a, b) for a, b in zip(initial, model.get_weights(), strict=True))
    np.random.seed(5)
    assert after_fit == np.random.random()
    # Once: the next fit runs as it is, nothing more printed.
    model.fit(*arrays(), batch_size=8, epochs=1, verbose=0)
    assert capsys.readouterr().out == ""


@pytest.mark.tensorflow
def test_a_generator_cannot_be_replayed_so_the_fit_runs_unchanged_with_a_warning():
    model = launch_bound_model()
    x, y = arrays()
    tfthroughput.autotune(**QUICK)
    batches = ((x[i : i + 8], y[i : i + 8]) for i in range(0, 64, 8))
    with pytest.warns(MonitoringWarning, match=r"one-shot generator, which cannot be replayed"):
        history = model.fit(batches, steps_per_epoch=8, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1 and model.steps_per_execution == 1


@pytest.mark.tensorflow
def test_under_autolog_the_tuned_fit_is_monitored_and_disabling_autotune_keeps_autolog(
    tmp_path, capsys
):
    tfthroughput.autolog(log_dir=tmp_path)
    tfthroughput.autotune(**QUICK)
    model = launch_bound_model()
    model.fit(*arrays(), batch_size=8, epochs=1, verbose=0)
    assert "as given: steps_per_execution=1" in capsys.readouterr().out
    assert (tmp_path / "fit-1").is_dir()
    tfthroughput.autotune(disable=True)
    assert keras_patch.is_patched()  # autolog's patch stays


def test_disabled_before_the_call_nothing_is_tuned_and_keras_is_restored():
    tfthroughput.autotune(time_budget=5)
    assert keras_patch.is_patched()
    tfthroughput.autotune(disable=True)
    assert not keras_patch.is_patched()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"time_budgett": 5}, r"`time_budgett` is not an option of tune .*time_budget"),
        ({"data": [1]}, r"autotune takes `data` from the call it tunes.*Received: data=\[1\]"),
        ({"disable": "yes"}, r"`disable` must be"),
    ],
)
def test_bad_options_are_refused_before_anything_is_patched(options, message):
    with pytest.raises(TypeError, match=message):
        tfthroughput.autotune(**options)
    assert not keras_patch.is_patched()
