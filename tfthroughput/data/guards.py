"""Build-time checks of :func:`tfthroughput.build_pipeline`: mistakes refused before any ``next()``.

Each check raises a ``TypeError`` or ``ValueError`` that names the argument and the value
received, Keras style, so that a wrong pipeline fails where it is built rather than at the
first batch, or worse, trains on the wrong thing (batches of batches, a cache that freezes the
first epoch's random draws).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tfthroughput._validation import check_bool, check_positive_int


def _check_arguments(
    *,
    functions: dict[str, Any],
    batch_size: Any,
    shuffle_buffer: Any,
    parallel_reads: Any,
    ram_budget_mib: Any,
    threadpool_size: Any,
    drop_remainder: Any,
    deterministic: Any,
    seed: Any,
    repeat: Any,
) -> None:
    """Types and ranges of the builder's plain arguments (everything but the source and cache)."""
    for name, fn in functions.items():
        if fn is not None and not callable(fn):
            raise TypeError(f"`{name}` must be a callable or None. Received: {name}={fn!r}")
    for name, value in (
        ("batch_size", batch_size),
        ("shuffle_buffer", shuffle_buffer),
        ("parallel_reads", parallel_reads),
        ("ram_budget_mib", ram_budget_mib),
        ("threadpool_size", threadpool_size),
    ):
        check_positive_int(name, value, allow_none=True)
    check_bool("drop_remainder", drop_remainder)
    check_bool("deterministic", deterministic)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"`seed` must be an int or None. Received: seed={seed!r}")
    if not isinstance(repeat, bool):
        check_positive_int("repeat", repeat, allow_none=False, also="or a bool")
    if batch_size is None and functions.get("batch_fn") is not None:
        raise ValueError(
            "`batch_fn` works on batches, so it needs a `batch_size`. "
            f"Received: batch_size=None, batch_fn={functions['batch_fn']!r}"
        )
    if drop_remainder and batch_size is None:
        raise ValueError(
            "`drop_remainder` needs a `batch_size`. Received: batch_size=None, drop_remainder=True"
        )


def _check_cache(cache: Any) -> str | None:
    """``None`` for no cache, ``""`` for memory, else the file prefix (its folder checked)."""
    if cache is False:
        return None
    if cache is True:
        return ""
    if not isinstance(cache, (str, os.PathLike)):
        raise TypeError(
            "`cache` must be a bool (True: in memory) or a file path prefix. "
            f"Received: cache={cache!r}"
        )
    path = os.fspath(cache)
    if not path:
        raise ValueError(
            "`cache` must be True for an in-memory cache or a non-empty path. Received: cache=''"
        )
    if "://" in path:  # remote file systems (gs://, hdfs://): tf.data reports problems there
        return path
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(
            f"`cache` must be in an existing folder; {folder!r} does not exist. "
            f"Received: cache={path!r}"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(
            f"`cache` must be in a writable folder; {folder!r} is not writable. "
            f"Received: cache={path!r}"
        )
    return path


def _check_cacheable(dataset: tf.data.Dataset, cache: Any, source: Any) -> None:
    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            "`cache` needs a finite dataset: the source repeats forever, so the cache "
            "would never be complete and would grow until memory or disk runs out. "
            "Pass a finite source and use `repeat=True` instead. "
            f"Received: cache={cache!r} with source={_short(source)}"
        )


def _batching_stage(dataset: tf.data.Dataset) -> str | None:
    """The transformation that made ``dataset``'s elements batches, or ``None`` if unbatched.

    Walks the dataset's inputs back from its output: the nearest ``batch``-like stage
    (``batch``, ``padded_batch``, ``ragged_batch``, ``rebatch``, ...) means batched, the nearest
    ``unbatch`` means not. Batches made inside a function (``interleave``, ``flat_map``) are
    not seen.
    """
    pending, seen = [dataset], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        kind = type(current).__name__.lower()
        if "unbatch" in kind:
            continue
        if "batch" in kind:
            return type(current).__name__
        pending.extend(
            parent for parent in current._inputs() if isinstance(parent, tf.data.Dataset)
        )
    return None


def _check_not_batched(dataset: tf.data.Dataset, batch_size: int | None) -> None:
    """Refuse to batch a dataset whose elements are already batches."""
    if batch_size is None:
        return
    stage = _batching_stage(dataset)
    if stage is not None:
        raise ValueError(
            f"`source` is already batched (it has a {stage} stage), so `batch_size` would make "
            "batches of batches. Pass `batch_size=None` to keep its batches, or pass the "
            "dataset before its `.batch()` (or `.unbatch()` it) to let the builder batch. "
            f"Received: batch_size={batch_size}, source with element_spec={dataset.element_spec}"
        )


def _checked(fn: Callable, name: str, *, same_structure: bool = False) -> Callable:
    """Wrap a user function so that a wrong return is refused while tf.data traces it."""

    def call(*args: Any) -> Any:
        result = fn(*args)
        if result is None:
            raise TypeError(
                f"`{name}` must return a tensor or a structure of tensors, but it returned "
                f"None (a missing `return`?). Received: {name}={fn!r}"
            )
        if same_structure:
            given = args[0] if len(args) == 1 else args
            try:
                tf.nest.assert_same_structure(given, result, check_types=False)
            except (ValueError, TypeError) as error:
                raise ValueError(
                    f"`{name}` must return the same structure it receives (e.g. (image, label) "
                    f"-> (image, label)); change the structure in `preprocess_fn` instead. "
                    f"Received: {name}={fn!r} returned {_structure(result)} for "
                    f"{_structure(given)}"
                ) from error
        return result

    call.__name__ = name  # tf.data names the traced function after it: map(preprocess_fn)
    return call


def _check_batchable(dataset: tf.data.Dataset, producer: str) -> None:
    unknown = [
        spec
        for spec in tf.nest.flatten(dataset.element_spec)
        if isinstance(spec, tf.TensorSpec) and not spec.shape.is_fully_defined()
    ]
    if unknown:
        raise ValueError(
            "Examples must have fully known shapes to be batched (tensors of different shapes "
            f"cannot be stacked); give them one in `{producer}` (e.g. tf.image.resize, "
            "tf.ensure_shape), or pass `batch_size=None` and batch them yourself (e.g. "
            f"padded_batch). Received: element_spec={dataset.element_spec}"
        )


def _last_function(read_fn: Any, preprocess_fn: Any, augment_fn: Any) -> str:
    """The argument whose function last shaped the examples, for the batching error."""
    for name, fn in (("augment_fn", augment_fn), ("preprocess_fn", preprocess_fn)):
        if fn is not None:
            return name
    return "read_fn" if read_fn is not None else "preprocess_fn"


def _structure(value: Any) -> str:
    return str(tf.nest.map_structure(lambda _: "*", value))


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
