"""A trial model's build under a ``tf.distribute`` strategy from its input's shapes, without
the throwaway iterator Keras makes at the start of every ``fit``.

Under a strategy, Keras's TensorFlow trainer starts each ``fit`` by making a distributed
iterator over the input, taking one batch from it to build the model symbolically, and
dropping the iterator at once (``epoch_iterator.reset()``) while its ``MultiDeviceIterator``
is still starting to prefetch on TensorFlow's own threads. A search fits hundreds of models
in one process, and plain Keras doing the same (a loop of small models under
``OneDeviceStrategy``, five fits each) died there with a segmentation fault on a TensorFlow
thread about once in 300-1,600 fits (``docs/tuning.md``, "Under a strategy"). A trial's model
is built once from the input's element spec instead, and each of its fits makes only the
iterator it trains from.
"""

from __future__ import annotations

from typing import Any

import keras

_PATCHED = "_tfthroughput_built_from_spec"


def build_from_spec(model: keras.Model, feed: dict[str, Any]) -> bool:
    """Build ``model`` (its layers, compiled loss and metrics, optimizer) from the shapes of
    ``feed``'s input where it trains under a strategy, and make its later fits build from
    them too, never from an iterator of their own; whether it was done (no strategy, another
    backend, or an input whose shapes are not plain tensors: Keras builds as it does)."""
    if getattr(model, _PATCHED, False):
        return True
    if getattr(model, "_distribute_strategy", None) is None:
        return False
    batch = symbolic_batch(feed)
    if batch is None:
        return False
    keras_build = model._maybe_symbolic_build

    def from_spec(iterator: Any = None, data_batch: Any = None) -> None:
        keras_build(data_batch=batch if data_batch is None else data_batch)

    from_spec(data_batch=batch)
    model._maybe_symbolic_build = from_spec
    setattr(model, _PATCHED, True)
    return True


def symbolic_batch(feed: dict[str, Any]) -> Any | None:
    """One batch of ``fit``'s input as Keras tensors of its shapes and dtypes (batch dimension
    unknown): a ``tf.data.Dataset``'s element spec, or arrays' trailing shapes; ``None`` for
    anything else (a ``PyDataset``, ragged or sparse elements)."""
    x = feed.get("x")
    spec = getattr(x, "element_spec", None)
    if spec is not None:
        leaves = keras.tree.flatten(spec)
        if not all(type(leaf).__name__ == "TensorSpec" for leaf in leaves):
            return None
        return keras.tree.map_structure(
            lambda leaf: keras.KerasTensor(unknown_batch(tuple(leaf.shape)), leaf.dtype.name), spec
        )
    given = [x, feed.get("y"), feed.get("sample_weight")]
    while given and given[-1] is None:
        given.pop()
    leaves = keras.tree.flatten(given)
    if not leaves or not all(hasattr(leaf, "shape") and hasattr(leaf, "dtype") for leaf in leaves):
        return None

    def unbatched(leaf: Any) -> Any:
        dtype = keras.backend.standardize_dtype(leaf.dtype)
        return keras.KerasTensor(unknown_batch(tuple(leaf.shape)), dtype)

    return tuple(keras.tree.map_structure(unbatched, given))


def unknown_batch(shape: tuple) -> tuple:
    """``shape`` with its batch dimension unknown: a strategy splits the global batch among its
    replicas, and a model built from a batch of the global size would record that size."""
    return (None, *shape[1:]) if shape else shape
