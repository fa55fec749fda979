"""What every trial's runner does (tuning/engine/trial_runner.py): the start builds a fresh
model (as given or under the trial's setup), times its build and warm-up on the injected clock
and measures the memory it added; a failure to build is a TrialFailed unless it is the user's
to fix; close drops the model. The runner here warms up by advancing a FakeClock (and holding
a known allocation); the model is tiny and never trained."""

from __future__ import annotations

import gc
import weakref

import keras
import numpy as np
import pytest
from fakes import FakeClock
from tiny_models import float32_policy  # noqa: F401 - fixture

from tfthroughput.tuning.engine.trial_model import TrialFailed, device_peak_bytes
from tfthroughput.tuning.engine.trial_runner import TrialRunner
from tfthroughput.tuning.setup import TuneSetup

pytestmark = pytest.mark.usefixtures("float32_policy")

BUILD_SECONDS, WARM_UP_SECONDS = 2.0, 3.0


class Runner(TrialRunner):
    """Its warm-up costs ``WARM_UP_SECONDS`` on the clock and holds ``hold_mib`` of memory."""

    loop, host_memory = "train", False

    def __init__(self, setup, build_model, *, clock, hold_mib=0, batch_size=16):
        super().__init__(setup, build_model, steps=4, seed=0, clock=clock, batch_size=batch_size)
        self.hold_mib, self.held = hold_mib, None

    def _warm_up(self):
        self.held = np.ones(self.hold_mib * 2**20, dtype=np.uint8) if self.hold_mib else None
        self._clock.advance(WARM_UP_SECONDS)


def builder(clock=None, *, output_dtype="float32"):
    """A compiled tiny model (``steps_per_execution=4``) whose build costs ``BUILD_SECONDS``."""

    def build_model():
        if clock is not None:
            clock.advance(BUILD_SECONDS)
        model = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(8),
                keras.layers.Dense(1, name="logits", dtype=output_dtype),
            ]
        )
        model.compile("sgd", "mse", steps_per_execution=4, jit_compile=False)
        return model

    return build_model


def test_the_start_builds_the_model_as_given_and_times_its_build_and_warm_up():
    clock = FakeClock(100.0)
    runner = Runner(None, builder(clock), clock=clock, batch_size=16)
    starts = TrialRunner.starts

    runner.start()

    assert isinstance(runner.model, keras.Model) and runner.model.steps_per_execution == 4
    assert runner.setup == TuneSetup(4, False, "float32", batch_size=16)
    assert runner.warmup_seconds == BUILD_SECONDS + WARM_UP_SECONDS
    assert TrialRunner.starts == starts + 1
    assert runner.figures() == {
        "warmup_seconds": 5.0,
        "memory_mib": runner.memory_mib,
        "reason": "",
    }


def test_the_start_under_a_setup_keeps_it_and_its_low_precision_notes_become_the_reason():
    clock = FakeClock()
    setup = TuneSetup(2, False, "mixed_bfloat16", batch_size=16)
    runner = Runner(setup, builder(output_dtype=None), clock=clock)
    runner.notes.append("an earlier note")

    runner.start()

    assert runner.setup is setup and runner.model.steps_per_execution == 2
    reason = runner.figures()["reason"]
    assert reason.startswith("an earlier note; Model ")
    assert reason.endswith("has outputs computed in low precision: 'logits' (bfloat16)")


def test_a_builder_that_returns_no_model_fails_the_trial_or_raises_for_the_baseline():
    clock = FakeClock()
    runner = Runner(None, lambda: "not a model", clock=clock)
    with pytest.raises(TrialFailed, match="^TypeError: `build_model` must return a compiled"):
        runner.start()
    with pytest.raises(TypeError, match="`build_model` must return a compiled keras.Model"):
        runner.start(user_model_errors=True)


def test_a_builder_that_fails_for_lack_of_memory_fails_the_trial_even_for_the_baseline():
    def build_model():
        raise MemoryError("no room for the embedding")

    runner = Runner(None, build_model, clock=FakeClock())
    for user_model_errors in (False, True):
        with pytest.raises(TrialFailed, match=r"^out of memory \(MemoryError: no room"):
            runner.start(user_model_errors=user_model_errors)
    assert runner.model is None and runner.warmup_seconds == 0.0


def test_the_memory_of_a_start_is_what_it_added_where_the_backend_tells_no_device_peak():
    if device_peak_bytes() is not None:
        pytest.skip("the device tells its own peak")
    clock = FakeClock()
    device_only = Runner(None, builder(), clock=clock, hold_mib=64)
    device_only.start()
    assert device_only.memory_mib is None

    host = Runner(None, builder(), clock=clock, hold_mib=64)
    host.host_memory = True
    host.start()
    assert 60 <= host.memory_mib < 1024  # the 64 MiB the warm-up holds, and the tiny model


def test_the_defaults_a_mode_may_override():
    runner = Runner(None, builder(), clock=FakeClock())
    assert runner.reference is None
    assert runner.before_round() is None and runner.rewarm() is None
    with pytest.raises(NotImplementedError):
        runner.run()

    class NoWarmUp(TrialRunner):
        loop, host_memory = "train", False

    with pytest.raises(NotImplementedError):
        NoWarmUp(None, builder(), steps=1, seed=0, clock=FakeClock(), batch_size=8).start()


def test_close_drops_the_model_and_collects_it():
    runner = Runner(None, builder(), clock=FakeClock())
    runner.start()
    model = weakref.ref(runner.model)
    gc.collect()
    assert model() is not None

    runner.close()

    assert runner.model is None and model() is None
