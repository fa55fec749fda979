"""A trial's model (tuning/engine/trial_model.py): the reason a failed trial shows in one line
(never the user's values), the failures that become TrialFailed, the fresh model as given or
under a setup, and the device's peak memory. The models are tiny and never trained; the GPU's
memory figures come from a fake ``tensorflow`` module, the only hardware here."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import keras
import numpy as np
import pytest
from tiny_models import float32_policy  # noqa: F401 - fixture

from tfthroughput.tuning.engine.trial_model import (
    USER_MODEL_ERRORS,
    TrialFailed,
    configured_model,
    device_peak_bytes,
    failure_reason,
    trial_failures,
    trial_model,
    without_values,
)
from tfthroughput.tuning.setup import TuneSetup

pytestmark = pytest.mark.usefixtures("float32_policy")


def build(*, compiled: bool = True, output_dtype: str | None = "float32", **compile_args):
    """A tiny model: 4 features, one hidden layer, an output layer named ``logits``."""

    def build_model() -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dense(2, name="logits", dtype=output_dtype),
            ]
        )
        if compiled:
            model.compile("sgd", "mse", **compile_args)
        return model

    return build_model


@pytest.mark.parametrize(
    "text, cut",
    [
        ("Incompatible shapes: array([[1., 2.]])", "Incompatible shapes: ..."),
        ("Got tf.Tensor([1 2], shape=(2,), dtype=int32)", "Got ..."),
        ("Expected a batch of [[0.5 1.2] [0.1 0.3]]", "Expected a batch of ..."),
        ("Values [ 0.25, 0.5]", "Values ..."),
        ("Labels [1 2 3 4] out of range", "Labels ..."),
        ("Labels [-1 2 3] out of range", "Labels ..."),
    ],
)
def test_a_text_is_cut_where_it_starts_printing_values(text, cut):
    assert without_values(text) == cut


def test_a_text_with_shapes_and_no_values_is_kept_whole():
    for text in ("Input 0 expects shape (None, 4), found shape [8, 3]", "Labels [1 2]", ""):
        assert without_values(text) == text


def test_a_failure_reason_is_the_first_line_of_the_error_cut_at_160_characters():
    assert failure_reason(RuntimeError("the step failed\nTraceback ..."), "train") == (
        "RuntimeError: the step failed"
    )
    assert failure_reason(RuntimeError("x" * 300), "train") == "RuntimeError: " + "x" * 160
    assert failure_reason(KeyError(), "predict") == "KeyError"
    assert failure_reason(RuntimeError("  \n  "), "predict") == "RuntimeError"


def test_a_failure_reason_names_out_of_memory_xla_and_a_replicas_failure():
    class ResourceExhaustedError(Exception):  # TensorFlow's, by its name
        pass

    oom = ResourceExhaustedError("OOM when allocating tensor with shape[4096,4096]")
    assert failure_reason(oom, "train") == (
        "out of memory (ResourceExhaustedError: OOM when allocating tensor with shape[4096,4096])"
    )
    assert failure_reason(MemoryError("no room"), "train") == (
        "out of memory (MemoryError: no room)"
    )
    xla = RuntimeError("Detected unsupported operations when trying to compile graph")
    assert failure_reason(xla, "predict") == (
        "XLA could not compile the predict step "
        "(Detected unsupported operations when trying to compile graph)"
    )
    replica = ValueError("Trying to access resource dense/kernel/replica_1")
    assert failure_reason(replica, "train").startswith("XLA compiles all replicas' step")


def test_trial_failures_turn_an_error_into_a_trial_failed_with_its_reason():
    with pytest.raises(TrialFailed) as caught:
        with trial_failures("train"):
            raise MemoryError("no room")
    assert str(caught.value) == "out of memory (MemoryError: no room)"
    assert isinstance(caught.value.__cause__, MemoryError)

    with pytest.raises(TrialFailed, match="^ValueError: bad builder$"):
        with trial_failures("train"):
            raise ValueError("bad builder")


def test_trial_failures_let_a_trial_failed_and_the_passing_errors_through_unchanged():
    original = TrialFailed("outputs off")
    with pytest.raises(TrialFailed) as caught:
        with trial_failures("predict"):
            raise original
    assert caught.value is original

    for error in (TypeError("not a model"), ValueError("not compiled")):
        with pytest.raises(type(error)) as caught:
            with trial_failures("train", USER_MODEL_ERRORS):
                raise error
        assert caught.value is error

    with trial_failures("train"):  # nothing raised, nothing to translate
        pass


def test_the_model_as_given_tells_its_setup_and_starts_from_the_seeds_weights():
    builder = build(steps_per_execution=4, jit_compile=False)
    model, setup, notes = trial_model(builder, None, seed=3, batch_size=32, loop="train")
    again, _, _ = trial_model(builder, None, seed=3, batch_size=32, loop="train")
    other, _, _ = trial_model(builder, None, seed=4, batch_size=32, loop="train")

    assert setup == TuneSetup(4, False, "float32", batch_size=32)
    assert notes == []
    assert np.array_equal(model.layers[0].kernel.numpy(), again.layers[0].kernel.numpy())
    assert not np.array_equal(model.layers[0].kernel.numpy(), other.layers[0].kernel.numpy())


def test_the_model_as_given_must_be_compiled_for_training_only():
    with pytest.raises(ValueError, match="compile"):
        trial_model(build(compiled=False), None, seed=0, batch_size=8, loop="train")
    with pytest.raises(TypeError, match="`build_model` must return a compiled keras.Model"):
        trial_model(lambda: "a model", None, seed=0, batch_size=8, loop="train")
    _, setup, _ = trial_model(build(compiled=False), None, seed=0, batch_size=8, loop="predict")
    assert setup.steps_per_execution == 1 and setup.policy == "float32"


def test_a_configured_model_has_the_setups_knobs_and_rebuilds_its_step():
    def build_model():  # a builder whose model made its train function already
        model = build()()
        model.make_train_function()
        return model

    setup = TuneSetup(8, False, "mixed_bfloat16", batch_size=16)
    model, setup_back, notes = trial_model(build_model, setup, seed=0, batch_size=16, loop="train")

    assert setup_back is setup and notes == []  # the output layer is float32
    assert model.steps_per_execution == 8 and model.jit_compile is False
    assert model.layers[0].compute_dtype == "bfloat16"
    assert model.train_function is None
    assert keras.config.dtype_policy().name == "float32"  # the policy was scoped to the build


def test_a_configured_model_notes_outputs_computed_in_low_precision():
    setup = TuneSetup(1, False, "mixed_bfloat16")
    _, notes = configured_model(build(output_dtype=None), setup, loop="train")
    assert len(notes) == 1
    assert notes[0].endswith("has outputs computed in low precision: 'logits' (bfloat16)")
    # predict's outputs are checked against the baseline's instead, not here.
    assert configured_model(build(output_dtype=None), setup, loop="predict")[1] == []


def test_xla_on_a_model_with_a_layer_keras_cannot_compile_fails_the_trial():
    class NoXLA(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.supports_jit = False

        def call(self, inputs):
            return inputs

    def build_model():
        model = keras.Sequential([keras.Input((4,)), NoXLA(), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        return model

    with pytest.raises(TrialFailed, match=r"^a layer of the model does not support XLA"):
        configured_model(build_model, TuneSetup(1, True, "float32"), loop="train")
    model, _ = configured_model(build_model, TuneSetup(2, False, "float32"), loop="train")
    assert model.steps_per_execution == 2


class FakeMemoryInfo:
    """``tf.config`` of a machine with one GPU whose peak is ``peak`` bytes, or ``error``."""

    def __init__(self, peak: int = 0, error: Exception | None = None, gpus: int = 1):
        self.peak, self.error, self.resets = peak, error, []
        self.gpus = [SimpleNamespace(name=f"/device:GPU:{i}") for i in range(gpus)]
        self.experimental = SimpleNamespace(
            get_memory_info=self._info, reset_memory_stats=self.resets.append
        )

    def list_logical_devices(self, kind):
        return self.gpus if kind == "GPU" else []

    def _info(self, name):
        if self.error is not None:
            raise self.error
        return {"current": 0, "peak": self.peak}


@pytest.fixture
def fake_tensorflow(monkeypatch):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the TensorFlow backend's reading")

    def install(config: FakeMemoryInfo) -> FakeMemoryInfo:
        monkeypatch.setitem(sys.modules, "tensorflow", SimpleNamespace(config=config))
        return config

    return install


def test_the_peak_of_the_first_gpu_is_read_and_reset(fake_tensorflow):
    config = fake_tensorflow(FakeMemoryInfo(peak=3 * 2**30, gpus=2))
    assert device_peak_bytes() == 3 * 2**30
    assert config.resets == ["/device:GPU:0"]  # the next trial's peak is its own


def test_no_gpu_or_a_gpu_that_tells_no_memory_has_no_peak(fake_tensorflow):
    fake_tensorflow(FakeMemoryInfo(gpus=0))
    assert device_peak_bytes() is None
    config = fake_tensorflow(FakeMemoryInfo(error=ValueError("not supported on this device")))
    assert device_peak_bytes() is None
    assert config.resets == []
