"""mixed_precision (scoped and one-shot) and the low-precision output check."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
from tiny_models import float32_policy, regression_data, tiny_regression_model  # noqa: F401

from tfthroughput.precision.policy import (
    PolicyChange,
    check_mixed_precision_outputs,
    mixed_precision,
)
from tfthroughput.precision.precision_recommendation import DeviceDescription

pytestmark = pytest.mark.usefixtures("float32_policy")

T4 = DeviceDescription("GPU", "Tesla T4", (7, 5))
CPU_PLAIN = DeviceDescription("CPU", "Core i7", cpu_flags={"sse4_2", "avx2", "fma"})

# --- mixed_precision ---------------------------------------------------------------------------


def test_scope_sets_and_restores_the_exact_policy_object():
    before = keras.config.dtype_policy()
    with mixed_precision("mixed_bfloat16") as change:
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
        assert (change.previous, change.current, change.changed) == (
            "float32",
            "mixed_bfloat16",
            True,
        )
        assert change.recommendation is None
    assert keras.config.dtype_policy() is before


def test_scope_restores_after_an_exception():
    before = keras.config.dtype_policy()
    with pytest.raises(ZeroDivisionError):
        with mixed_precision("mixed_float16"):
            assert keras.config.dtype_policy().name == "mixed_float16"
            1 / 0  # noqa: B018
    assert keras.config.dtype_policy() is before


def test_nested_scopes_unwind_in_order():
    with mixed_precision("mixed_float16"):
        outer = keras.config.dtype_policy()
        with mixed_precision("mixed_bfloat16"):
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
        assert keras.config.dtype_policy() is outer
    assert keras.config.dtype_policy().name == "float32"


def test_one_shot_sets_reports_and_can_restore():
    before = keras.config.dtype_policy()
    change = mixed_precision("mixed_bfloat16")
    assert isinstance(change, PolicyChange)
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    assert str(change) == "dtype policy: float32 -> mixed_bfloat16"
    change.restore()
    assert keras.config.dtype_policy() is before
    assert str(mixed_precision("float32")) == "dtype policy unchanged: float32"


def test_auto_follows_the_recommendation_for_given_devices():
    with mixed_precision("auto", devices=[T4]) as change:
        assert keras.config.dtype_policy().name == "mixed_float16"
        assert change.recommendation.policy == "mixed_float16"
    with mixed_precision(devices=[CPU_PLAIN]) as change:
        assert change.current == "float32"
        assert not change.changed


def test_accepts_a_dtype_policy_object():
    policy = keras.DTypePolicy("mixed_bfloat16")
    with mixed_precision(policy):
        assert keras.config.dtype_policy() is policy


def test_mixed_precision_validates_its_arguments():
    with pytest.raises(ValueError, match="Received: policy='mixed_float8'"):
        mixed_precision("mixed_float8")
    with pytest.raises(TypeError, match="Received: policy=16"):
        mixed_precision(16)
    with pytest.raises(ValueError, match="only used with policy='auto'"):
        mixed_precision("float32", devices=[T4])
    assert keras.config.dtype_policy().name == "float32"


def test_tiny_model_trains_under_mixed_bfloat16():
    keras.utils.set_random_seed(0)
    x, y = regression_data()
    with mixed_precision("mixed_bfloat16"):
        model = tiny_regression_model()
    assert model.layers[0].compute_dtype == "bfloat16"
    assert model.layers[0].kernel.dtype == "float32"
    assert check_mixed_precision_outputs(model) == ()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    losses = model.fit(x, y, batch_size=32, epochs=5, verbose=0).history["loss"]
    assert losses[-1] < losses[0] / 2


# --- guards and helpers ------------------------------------------------------------------------


def test_low_precision_output_warns_with_the_fix():
    with mixed_precision("mixed_bfloat16"):
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(3, activation="softmax", name="probs")]
        )
    with pytest.warns(UserWarning, match=r"'probs' \(bfloat16\).*dtype='float32'"):
        assert check_mixed_precision_outputs(model) == ("probs",)
    with pytest.raises(ValueError, match=r"'probs' \(bfloat16\)"):
        check_mixed_precision_outputs(model, strict=True)


def test_functional_model_with_several_outputs():
    with mixed_precision("mixed_float16"):
        inputs = keras.Input((4,))
        hidden = keras.layers.Dense(8)(inputs)
        logits = keras.layers.Dense(3, name="logits")(hidden)
        value = keras.layers.Dense(1, dtype="float32", name="value")(hidden)
        model = keras.Model(inputs, [logits, value])
    with pytest.warns(UserWarning, match=r"'logits' \(float16\)"):
        assert check_mixed_precision_outputs(model) == ("logits",)


def test_float32_model_passes_silently():
    model = tiny_regression_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_mixed_precision_outputs(model, strict=True) == ()


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.out = keras.layers.Dense(2, name="head")

    def call(self, x):
        return self.out(x)


def test_subclassed_model_is_checked_by_its_last_layer():
    with mixed_precision("mixed_bfloat16"):
        model = _Subclassed()
    with pytest.raises(ValueError, match="must be built"):
        check_mixed_precision_outputs(model)
    model(np.zeros((1, 4), "float32"))
    with pytest.warns(UserWarning, match=r"'head' \(bfloat16\)"):
        assert check_mixed_precision_outputs(model) == ("head",)
