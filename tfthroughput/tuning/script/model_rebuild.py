"""A zero-argument ``build_model`` made from a model a script built and compiled, for
``tfthroughput tune SCRIPT``.

Each call makes a new model with ``keras.models.clone_model`` (Sequential and functional
models from their layers; any other class from ``get_config``/``from_config``), gives it the
weights the script's model had at the captured call, and compiles it with the script's compile
arguments, the optimizer and metric objects copied from their configs so that no trial shares
state with the script's own model. Nothing is done to the script's model but reading it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class CannotRebuild(Exception):
    """The model cannot be rebuilt from what Keras knows of it; the message says what to do."""


def builder(model: Any, compile_arguments: dict[str, Any], weights: list | None) -> Callable:
    """A ``build_model`` for ``tune``, checked by building one model now.

    Raises:
        CannotRebuild: If cloning, weighting or compiling a copy fails.
    """

    def build_model():
        return _rebuilt(model, compile_arguments, weights)

    try:
        build_model()
    except Exception as error:
        name = type(model).__name__
        raise CannotRebuild(
            f"cannot rebuild the model: {name} "
            f"({type(error).__name__}: {_one_line(error)}). A Sequential or functional model "
            f"is rebuilt from its layers, any other class from get_config()/from_config(); give "
            f"{name} a get_config() that returns its constructor's arguments, or call "
            "tfthroughput.tune(build_model, data) with a function that builds and compiles it"
        ) from None
    return build_model


def _rebuilt(model: Any, compile_arguments: dict[str, Any], weights: list | None) -> Any:
    import keras

    clone = keras.models.clone_model(model)
    if type(clone) is not type(model):  # a Sequential subclass comes back as Sequential,
        clone = type(model).from_config(model.get_config())  # its own train_step lost
    if weights is not None:
        if not clone.built:
            clone.build_from_config(model.get_build_config())
        clone.set_weights(weights)
    if compile_arguments:
        clone.compile(**_fresh(compile_arguments))
    return clone


def _fresh(compile_arguments: dict[str, Any]) -> dict[str, Any]:
    """The compile arguments with the stateful objects (the optimizer, metric instances)
    replaced by new ones from their configs."""
    arguments = dict(compile_arguments)
    optimizer = arguments.get("optimizer")
    if optimizer is not None and not isinstance(optimizer, str):
        arguments["optimizer"] = _copy(optimizer)
    for key in ("metrics", "weighted_metrics"):
        arguments[key] = _copy_metrics(arguments.get(key))
    return arguments


def _copy_metrics(metrics: Any) -> Any:
    import keras

    if isinstance(metrics, keras.metrics.Metric):
        return _copy(metrics)
    if isinstance(metrics, (list, tuple)):
        return type(metrics)(_copy_metrics(metric) for metric in metrics)
    if isinstance(metrics, dict):
        return {name: _copy_metrics(metric) for name, metric in metrics.items()}
    return metrics


def _copy(keras_object: Any) -> Any:
    import keras

    config = keras.saving.serialize_keras_object(keras_object)
    return keras.saving.deserialize_keras_object(config)


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split()) or "no message"
    return text if len(text) <= 160 else text[:157] + "..."
