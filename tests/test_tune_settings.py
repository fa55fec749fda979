"""What tune's search tries (tuning/_settings.py), decided from its checked arguments: the
bound on ``steps_per_execution`` (the epoch, the callbacks' batch hooks), the policy, XLA and
the pipeline, each knob bounded or left out with its note. No model is built or trained. The
callbacks' bound on its own: tests/test_tuner.py.

Where the Keras backend decides, its name is set for the test (``keras.backend.backend``):
the settings read nothing else of it."""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest
from tiny_models import float32_policy, tiny_mlp  # noqa: F401 - fixture

from tfthroughput.precision.precision_recommendation import DeviceDescription, recommend_precision
from tfthroughput.tuning._settings import inference_settings, training_settings
from tfthroughput.tuning.inference.data import InferenceArguments
from tfthroughput.tuning.training.data import TuneArguments
from tfthroughput.tuning.tuner import split_mode, tune

TUNE_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(tune).parameters.items()
    if parameter.default is not inspect.Parameter.empty
}
# 64 examples in batches of 16: an epoch of 4 steps.
X, Y = np.zeros((64, 16), "float32"), np.zeros((64, 1), "float32")


def arguments(**given):
    """tune's arguments as ``tune(tiny_mlp, (X, Y), batch_size=16, precision=False, **given)``
    checks them, for its mode."""
    called = {**TUNE_DEFAULTS, "build_model": tiny_mlp, "data": (X, Y)}
    called.update({"batch_size": 16, "precision": False, **given})
    training, inference = split_mode(called)
    return TuneArguments(**training) if inference is None else InferenceArguments(**inference)


@pytest.fixture
def backend(monkeypatch):
    """Sets the name the Keras backend gives."""
    return lambda name: monkeypatch.setattr(keras.backend, "backend", lambda: name)


class EveryFourBatches(keras.callbacks.Callback):
    update_freq = 4

    def on_train_batch_end(self, batch, logs=None):
        pass


class OnlyEpochs(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        pass


def test_the_arguments_reach_the_settings_as_checked():
    settings = training_settings(
        arguments(
            steps=24,
            rounds=4,
            time_budget=30,
            seed=7,
            confirm_rounds=6,
            loss_tolerance=0.1,
            allow_batch_change=True,
            max_steps_per_execution=2,
        )
    )
    assert (settings.steps, settings.rounds, settings.seed, settings.confirm_rounds) == (
        24,
        4,
        7,
        6,
    )
    assert settings.time_budget == 30.0 and isinstance(settings.time_budget, float)
    assert (settings.loss_tolerance, settings.allow_batch_change) == (0.1, True)
    # On TensorFlow, with precision=False: XLA flipped, the pipeline tried, no policy, and
    # nothing bounded below the limit of 2 (the epoch is 4 steps).
    assert (settings.try_xla, settings.try_pipeline, settings.policy) == (True, True, None)
    assert settings.max_steps_per_execution == 2
    assert (settings.epoch_steps, settings.callbacks, settings.notes) == (None, (), ())


def test_steps_per_execution_is_bounded_by_the_epoch_and_said_so():
    settings = training_settings(arguments())
    assert settings.max_steps_per_execution == 4
    assert settings.notes == ("steps_per_execution bounded by the epoch length (4 steps)",)
    # An epoch given by steps_per_epoch is the one to divide, and bounds it in its place.
    settings = training_settings(arguments(steps_per_epoch=6))
    assert (settings.max_steps_per_execution, settings.epoch_steps) == (6, 6)
    assert settings.notes[0].startswith("steps_per_execution divides the epoch (6 steps, ")
    assert settings.notes[1] == "steps_per_execution bounded by the epoch length (6 steps)"


def test_an_input_without_an_end_leaves_the_limit_as_given():
    tf = pytest.importorskip("tensorflow")
    endless = tf.data.Dataset.from_tensor_slices((X, Y)).batch(16).repeat()
    settings = training_settings(arguments(data=endless, batch_size=None))
    assert (settings.max_steps_per_execution, settings.notes) == (1024, ())


def test_callbacks_with_batch_hooks_bound_steps_per_execution_below_the_epoch():
    hooks = [OnlyEpochs(), EveryFourBatches()]
    settings = training_settings(arguments(callbacks=hooks, steps_per_epoch=64))
    assert settings.max_steps_per_execution == 4
    assert settings.callbacks == tuple(hooks)  # run in the confirmation's epochs
    assert settings.notes[1:] == (
        "steps_per_execution bounded by EveryFourBatches to 4: it needs its batch hook every "
        "4 batches",
        "steps_per_execution bounded by the epoch length (64 steps)",
    )
    # Below the callback's 4 already (an epoch of 2): the callback bounds nothing more.
    settings = training_settings(arguments(callbacks=hooks, steps_per_epoch=2))
    assert settings.max_steps_per_execution == 2
    assert not any("EveryFourBatches" in note for note in settings.notes)


@pytest.mark.parametrize("frequency", [0, -3, "batch", None])
def test_a_batch_hook_without_a_positive_update_freq_needs_every_batch(frequency):
    class Hooked(keras.callbacks.Callback):
        update_freq = frequency

        def on_batch_end(self, batch, logs=None):
            pass

    settings = training_settings(arguments(callbacks=(Hooked(),), steps_per_epoch=64))
    assert settings.max_steps_per_execution == 1
    assert "bounded by Hooked to 1: it needs its batch hook every batch" in settings.notes[1]


def test_callbacks_that_are_not_a_list_of_callbacks_are_refused():
    with pytest.raises(TypeError, match=r"Received: <function"):
        training_settings(arguments(callbacks=lambda: None))
    with pytest.raises(TypeError, match=r"list of keras\.callbacks\.Callback\. Received: \["):
        training_settings(arguments(callbacks=[OnlyEpochs(), "EarlyStopping"]))


@pytest.mark.usefixtures("float32_policy")
def test_the_policy_to_try_is_the_recommendation_unless_it_is_float32():
    a100 = recommend_precision([DeviceDescription("GPU", "NVIDIA A100", (8, 0))])
    assert training_settings(arguments(precision=a100)).policy == "mixed_bfloat16"
    old = recommend_precision([DeviceDescription("GPU", "Tesla P100", (6, 0))])
    settings = training_settings(arguments(precision=old, max_steps_per_execution=2))
    assert settings.policy is None
    assert settings.notes[0].startswith(
        "dtype policy not tried: recommend_precision says float32 ("
    )
    with pytest.raises(TypeError, match=r"`precision` must be None, False or a Precision"):
        training_settings(arguments(precision="mixed_bfloat16"))


def test_under_jax_xla_is_not_flipped_and_arrays_are_not_rebuilt(backend):
    given = arguments(max_steps_per_execution=2)
    backend("jax")
    settings = training_settings(given)
    assert (settings.try_xla, settings.try_pipeline) == (False, False)
    assert settings.notes == (
        "XLA not flipped: JAX compiles every step with XLA, and jit_compile=False would run the "
        "steps eagerly",
        "input pipeline not tried: the pipeline knob needs TensorFlow (Keras backend is jax)",
    )


def test_under_torch_xla_is_flipped_and_a_py_dataset_is_still_measured(backend):
    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return X[:16], Y[:16]

    given = arguments(data=Batches(), batch_size=None, max_steps_per_execution=2)
    backend("torch")
    settings = training_settings(given)
    assert (settings.try_xla, settings.try_pipeline, settings.notes) == (True, True, ())
    without = arguments(pipeline=False, xla=False, max_steps_per_execution=2)
    assert training_settings(without).try_pipeline is False  # not asked: no note
    assert training_settings(without).notes == ()


def test_inference_settings_leave_the_pipeline_out_and_bound_nothing_by_the_data():
    settings = inference_settings(arguments(mode="inference", max_batch_latency_ms=5))
    assert (settings.output_tolerance, settings.max_batch_latency_ms) == (0.02, 5.0)
    assert (settings.max_steps_per_execution, settings.try_xla, settings.policy) == (
        1024,
        True,
        None,
    )
    assert settings.notes == (
        "input pipeline not tried in inference mode: diagnose(model, dataset, "
        'mode="inference") measures whether it is the limit',
    )
    quiet = inference_settings(arguments(mode="inference", pipeline=False, output_tolerance=0.1))
    assert (quiet.notes, quiet.output_tolerance, quiet.max_batch_latency_ms) == ((), 0.1, None)


def test_under_jax_inference_says_why_xla_is_not_flipped(backend):
    given = arguments(mode="inference", pipeline=False)
    backend("jax")
    settings = inference_settings(given)
    assert settings.try_xla is False
    assert settings.notes == ("XLA not flipped: JAX compiles predict with XLA already",)
