"""loss_scale_optimizer and with_gradient_accumulation, in real training steps."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from tiny_models import float32_policy, regression_data, tiny_regression_model  # noqa: F401

from tfthroughput.precision.optimizers import loss_scale_optimizer, with_gradient_accumulation
from tfthroughput.precision.policy import mixed_precision

pytestmark = pytest.mark.usefixtures("float32_policy")


def test_loss_scale_optimizer_wraps_only_under_float16():
    sgd = keras.optimizers.SGD(0.1)
    assert loss_scale_optimizer(sgd) is sgd
    with mixed_precision("mixed_bfloat16"):
        assert loss_scale_optimizer(sgd) is sgd
    with mixed_precision("mixed_float16"):
        wrapped = loss_scale_optimizer(sgd)
        assert isinstance(wrapped, keras.optimizers.LossScaleOptimizer)
        assert wrapped.inner_optimizer is sgd
        assert loss_scale_optimizer(wrapped) is wrapped
    assert isinstance(
        loss_scale_optimizer("adam", policy="mixed_float16"),
        keras.optimizers.LossScaleOptimizer,
    )
    with pytest.raises(TypeError, match="Received: policy=16"):
        loss_scale_optimizer(sgd, policy=16)


def test_loss_scaled_custom_loop_step_reduces_the_loss():
    keras.utils.set_random_seed(0)
    x, y = regression_data()
    with mixed_precision("mixed_float16"):
        model = tiny_regression_model()
        optimizer = loss_scale_optimizer(keras.optimizers.SGD(0.05))

    def loss_value():
        return float(keras.losses.mean_squared_error(y[:, 0], model(x)[:, 0]).numpy().mean())

    first = loss_value()
    for _ in range(20):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.mean_squared_error(y, model(x)))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
    assert loss_value() < first / 2


def test_gradient_accumulation_updates_every_n_batches():
    x, y = regression_data()
    sgd = keras.optimizers.SGD(0.01, momentum=0.5)
    optimizer = with_gradient_accumulation(sgd, gradient_accumulation_steps=4)
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert optimizer.gradient_accumulation_steps == 4
    assert optimizer.momentum == 0.5
    model = tiny_regression_model()
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)  # 8 batches
    assert int(optimizer.iterations.numpy()) == 2
    assert with_gradient_accumulation("adam", 1).gradient_accumulation_steps is None


def test_gradient_accumulation_inside_a_loss_scale_optimizer():
    wrapped = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=128.0)
    result = with_gradient_accumulation(wrapped, 2)
    assert isinstance(result, keras.optimizers.LossScaleOptimizer)
    assert result.inner_optimizer.gradient_accumulation_steps == 2
    assert result.initial_scale == 128.0


def test_gradient_accumulation_guards():
    with pytest.raises(ValueError, match="Received: gradient_accumulation_steps=0"):
        with_gradient_accumulation("sgd", 0)
    with pytest.raises(TypeError, match="Received: gradient_accumulation_steps=2.0"):
        with_gradient_accumulation("sgd", 2.0)
    built = keras.optimizers.SGD()
    built.build([keras.Variable(np.zeros(2, "float32"))])
    with pytest.raises(ValueError, match="must not be built yet"):
        with_gradient_accumulation(built, 2)
