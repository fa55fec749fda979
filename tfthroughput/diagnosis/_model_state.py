"""Copy a Keras model's training state and write it back (diagnose trains the user's model)."""

from __future__ import annotations

import keras
import numpy as np


def build_state(model: keras.Model, first_batch: object) -> None:
    """Create the variables the first ``fit`` would create, so they can be restored."""
    if not model.built:
        x, _, _ = keras.utils.unpack_x_y_sample_weight(first_batch)
        model(x)
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)


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
