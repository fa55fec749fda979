"""The package's repeated Keras calls run with Python's cyclic collector paused (a collection
inside a call under a strategy, while Keras tears down a distributed iterator, can crash the
process), and the collector's state is the program's again afterwards."""

from __future__ import annotations

import gc

import keras
import numpy as np
import pytest
from fakes import FakeClock

from tfthroughput._collector import collector_paused


@pytest.fixture
def collector_on():
    assert gc.isenabled()
    yield
    gc.enable()


def test_the_collector_is_off_inside_and_on_again_after_even_when_the_block_raises(collector_on):
    with pytest.raises(RuntimeError, match="a trial failed"):
        with collector_paused():
            assert not gc.isenabled()
            raise RuntimeError("a trial failed")
    assert gc.isenabled()


def test_a_program_that_turned_the_collector_off_keeps_it_off(collector_on):
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


class _CollectorState(keras.callbacks.Callback):
    """Whether the collector was on at each epoch's end of the fits it is given to."""

    def __init__(self) -> None:
        super().__init__()
        self.enabled: list[bool] = []

    def on_epoch_end(self, epoch, logs=None):
        self.enabled.append(gc.isenabled())


def test_a_tune_trials_fits_under_a_strategy_run_with_the_collector_paused(collector_on):
    # Every timed run, the warm-up and the confirmation's epochs go through this one fit.
    tf = pytest.importorskip("tensorflow")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("tf.distribute needs the TensorFlow backend")
    from tfthroughput.tuning._fit_runner import FitRunner
    from tfthroughput.tuning.distribution import in_scope

    def build():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        return model

    x = np.ones((64, 4), "float32")
    state = _CollectorState()
    runner = FitRunner(
        None,
        in_scope(build, tf.distribute.OneDeviceStrategy("/cpu:0")),
        {"x": x, "y": x[:, :1], "batch_size": 8},
        steps=8,
        examples_per_step=8,
        seed=0,
        clock=FakeClock(),
        callbacks=[state],
    )
    runner.start()
    runner.run()
    runner.close()

    assert state.enabled == [False, False]  # the warm-up's epoch and the timed run's
    assert gc.isenabled()
