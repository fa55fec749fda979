"""Copy a Keras model's training state and write it back (diagnose trains the user's model)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf


def build_state(model: keras.Model, first_batch: object) -> None:
    """Create the variables the first ``fit`` would create, so they can be restored.

    A model whose optimizer is not built yet has its own ``train_step`` traced once on the
    batch's signature, without running it: the trace creates exactly the variables a first
    ``fit`` step creates (layers used only inside a custom ``train_step``, metric trackers,
    and the optimizer's slots for all of them), and no assignment of the trace runs. Building
    the optimizer on ``model.trainable_variables`` before the step would bind it to the
    variables that exist at that moment, and a custom ``train_step`` that builds more layers
    would then fail in Keras ("Unknown variable"). Under a ``tf.distribute`` strategy the
    model is built the way ``fit`` builds it there: called on the batch, then the optimizer
    built on its trainable variables.
    """
    if model.optimizer.built:  # trained (or built by hand): its variables all exist
        return
    if _under_strategy(model):
        with model.distribute_strategy.scope():
            if not model.built:
                _call(model, first_batch)
            model.optimizer.build(model.trainable_variables)
        return
    signature = tf.nest.map_structure(tf.type_spec_from_value, first_batch)
    tf.function(model.train_step).get_concrete_function(signature)
    if not model.optimizer.built:  # a train_step that steps other optimizers
        model.optimizer.build(model.trainable_variables)


def _call(model: keras.Model, batch: object) -> None:
    x, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
    model(x)


def _under_strategy(model: keras.Model) -> bool:
    # Keras sets this only for a model created in a strategy's scope (TensorFlow trainer).
    return getattr(model, "_distribute_strategy", None) is not None


def _state_variables(model: keras.Model) -> list:
    seen: set[int] = set()
    variables = []
    for variable in [*model.variables, *model.optimizer.variables, *model.metrics_variables]:
        if id(variable) not in seen:
            seen.add(id(variable))
            variables.append(variable)
    return variables


def snapshot(model: keras.Model) -> tuple[list, list[np.ndarray], object]:
    """Copies of every model, optimizer and metric variable, and ``model.history``."""
    variables = _state_variables(model)
    values = [np.array(v.numpy(), copy=True) for v in variables]
    return variables, values, getattr(model, "history", None)


def restore(model: keras.Model, saved: tuple[list, list[np.ndarray], object]) -> None:
    """Write back what :func:`snapshot` copied."""
    variables, values, history = saved
    for variable, value in zip(variables, values, strict=True):
        variable.assign(value)
    model.history = history
