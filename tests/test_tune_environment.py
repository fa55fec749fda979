"""What every tune search shares around its trials (tuning/engine/environment.py): the dtype
policy to try and why not, a clean Keras session that keeps the policy (and leaves a
strategy's scope alone), the caller's random state kept, and no GPU sampler without a GPU."""

from __future__ import annotations

import random
from types import SimpleNamespace

import keras
import numpy as np
import pytest
from tiny_models import float32_policy  # noqa: F401 - fixture

from tfthroughput.precision.precision_recommendation import (
    PrecisionRecommendation,
    recommend_precision,
)
from tfthroughput.tuning.engine.environment import (
    _cc,
    clear_session,
    gpu_sampler,
    policy_to_try,
    random_state_kept,
    recommendation_here,
)

pytestmark = pytest.mark.usefixtures("float32_policy")


def recommendation(policy: str) -> PrecisionRecommendation:
    return PrecisionRecommendation(
        policy, policy == "mixed_float16", True, f"why {policy}", "why scaling", "why XLA"
    )


def test_the_recommended_policy_is_tried_where_it_differs_from_the_policy_in_force():
    notes: list[str] = []
    assert policy_to_try(recommendation("mixed_float16"), notes) == "mixed_float16"
    assert policy_to_try(recommendation("mixed_bfloat16"), notes) == "mixed_bfloat16"
    assert policy_to_try(False, notes) is None
    assert notes == []  # precision=False is the user's choice: nothing to explain


def test_a_policy_not_tried_says_why():
    notes: list[str] = []
    keras.config.set_dtype_policy("mixed_bfloat16")
    assert policy_to_try(recommendation("float32"), notes) is None  # never a trial of its own
    assert policy_to_try(recommendation("mixed_bfloat16"), notes) is None
    assert notes == [
        "dtype policy not tried: recommend_precision says float32 (why float32)",
        "dtype policy not tried: recommend_precision says mixed_bfloat16 (why mixed_bfloat16)",
    ]


def test_precision_none_or_true_asks_for_this_machines_recommendation():
    here = recommendation_here().policy
    for precision in (None, True):
        notes: list[str] = []
        tried = policy_to_try(precision, notes)
        if here == "float32":
            assert tried is None and notes[0].startswith("dtype policy not tried: ")
        else:
            assert tried == here and notes == []


def test_a_precision_of_another_type_is_refused_with_what_was_received():
    with pytest.raises(TypeError) as caught:
        policy_to_try("mixed_float16", [])
    assert str(caught.value) == (
        "`precision` must be None, False or a PrecisionRecommendation (from "
        "recommend_precision). Received: precision='mixed_float16'"
    )


def test_this_machines_recommendation_under_tensorflow_is_recommend_precisions():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("TensorFlow's device list")
    assert recommendation_here() == recommend_precision()


def test_a_jax_devices_compute_capability_is_read_where_it_has_one():
    assert _cc(SimpleNamespace(compute_capability="9.0")) == (9, 0)
    assert _cc(SimpleNamespace(compute_capability="8.6")) == (8, 6)
    assert _cc(SimpleNamespace(compute_capability="9")) is None
    assert _cc(SimpleNamespace(compute_capability="sm_90a")) is None
    assert _cc(SimpleNamespace()) is None


def test_a_clear_session_keeps_the_policy_in_force():
    keras.config.set_dtype_policy("mixed_bfloat16")
    policy = keras.config.dtype_policy()
    keras.layers.Dense(1)
    clear_session(policy)

    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    assert keras.layers.Dense(1).name == "dense"  # Keras's session was cleared: names restart


def test_a_clear_session_inside_a_strategys_scope_leaves_the_scope_as_it_was():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("a tf.distribute scope")
    import tensorflow as tf

    clear_session(keras.config.dtype_policy())
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        keras.layers.Dense(1)
        clear_session(keras.config.dtype_policy())
        assert tf.distribute.get_strategy() is strategy
        assert keras.layers.Dense(1).name == "dense_1"  # Keras's state kept
    assert not tf.distribute.has_strategy()


def _draws() -> tuple[float, ...]:
    """One draw from each generator a program may use without a seed of its own."""
    draws = [random.random(), float(np.random.rand()), float(keras.random.uniform(()))]
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        draws.append(float(tf.random.uniform(())))
    return tuple(draws)


def test_the_random_state_after_the_block_is_the_callers_whatever_ran_inside():
    keras.utils.set_random_seed(7)
    _draws()
    expected = _draws()

    keras.utils.set_random_seed(7)
    _draws()
    with random_state_kept():
        keras.utils.set_random_seed(123)
        _draws()
    assert _draws() == expected


def test_the_random_state_is_kept_when_the_block_raises():
    keras.utils.set_random_seed(11)
    expected = _draws()

    keras.utils.set_random_seed(11)
    with pytest.raises(RuntimeError, match="trial"):
        with random_state_kept():
            keras.utils.set_random_seed(0)
            _draws()
            raise RuntimeError("a trial failed")
    assert _draws() == expected


def test_there_is_no_gpu_sampler_without_a_gpu():
    from conftest import _gpu_present

    if _gpu_present():
        pytest.skip("a GPU is present")
    assert gpu_sampler() is None
