"""The trials of :func:`tfthroughput.find_batch_size`: its arguments checked, then by default a
fresh model fit at one batch size.

It times ``steps`` training steps after as many warm-up steps and, with a memory ceiling,
measures the memory the trial itself adds (see :mod:`tfthroughput.diagnosis.trial_memory`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from tfthroughput._validation import check_callable, check_model, check_positive_int
from tfthroughput.data.keras_arrays import Arrays, as_arrays, is_arrays, keras_array_dataset
from tfthroughput.data.keras_inputs import EndlessPyDataset, is_py_dataset
from tfthroughput.diagnosis._timing import _timed_fit
from tfthroughput.diagnosis.trial_memory import PeakAdded, release_free_memory, rss


def training_arrays(data: object, y: object = None) -> Arrays | None:
    """``data`` as arrays, checked and made tensors once, when it is arrays: ``x`` and ``y``
    as ``fit(x, y)`` takes them, ``(x, y)`` in one tuple, or ``x`` alone (an array or a dict
    of them) as ``fit(x)`` takes it; else ``None``.

    Raises:
        ValueError: If ``y`` comes with data that is not arrays ``x``.
    """
    if y is not None:
        if not is_arrays(data) or not is_arrays(y):
            raise ValueError(
                "`y` is for NumPy arrays only, as in `find_batch_size(build, x, y)`: a "
                "dataset or a function of the batch size holds its own targets. Received: "
                f"y of type {type(y).__name__} with data of type {type(data).__name__}"
            )
        return as_arrays(data, y, x_name="data", y_name="y")
    if isinstance(data, tuple) and len(data) == 2 and is_arrays(data[0]):
        if data[1] is None or is_arrays(data[1]):
            return as_arrays(data[0], data[1], x_name="data[0]", y_name="data[1]")
    if is_arrays(data) and not isinstance(data, (tuple, list)):
        return as_arrays(data, x_name="data")
    return None


def _dataset_maker(data: object) -> Callable[[int], tf.data.Dataset]:
    if isinstance(data, Arrays):

        def make(batch_size: int) -> tf.data.Dataset:
            # Keras's pipeline over the arrays, as fit feeds them, full batches only: every
            # timed step holds batch_size examples. Each reads the same tensors (no copy).
            return keras_array_dataset(data, batch_size, full_batches=True).repeat()

        return make
    if isinstance(data, tf.data.Dataset):

        def make(batch_size: int) -> tf.data.Dataset:
            return data.repeat().batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

        return make
    if is_py_dataset(data):
        raise TypeError(
            "`data` must be a callable (batch_size -> tf.data.Dataset or keras.utils.PyDataset) "
            "or an unbatched tf.data.Dataset: a PyDataset makes batches of its own size, so "
            "pass a function that makes one per batch size, e.g. `lambda n: MyData(batch_size=n)`."
            f" Received: data={data!r} of type {type(data).__name__}"
        )
    if callable(data):

        def make(batch_size: int) -> tf.data.Dataset | EndlessPyDataset:
            dataset = data(batch_size)
            if is_py_dataset(dataset):  # fit reads it with its workers, pass after pass
                return dataset if dataset.num_batches is None else EndlessPyDataset(dataset)
            if not isinstance(dataset, tf.data.Dataset):
                raise TypeError(
                    "`data` must return a tf.data.Dataset or a keras.utils.PyDataset when "
                    f"called with a batch size. Received: data({batch_size}) returned {dataset!r}"
                )
            return dataset.repeat()

        return make
    raise TypeError(
        "`data` must be a callable (batch_size -> tf.data.Dataset or keras.utils.PyDataset), "
        "an unbatched tf.data.Dataset, or NumPy arrays (x, y), or x alone. "
        f"Received: data={data!r} of type {type(data).__name__}"
    )


@dataclass(frozen=True)
class _Ceiling:
    limit_bytes: int
    search_start_bytes: int  # RSS at the start of the search, after freeing what could be


@dataclass(frozen=True)
class _Measured:
    """What a default trial measured: its speed, and its own peak memory if asked for."""

    examples_per_second: float
    memory_bytes: int | None


class _DoesNotFit(Exception):
    def __init__(self, reason: str, memory_bytes: int | None = None) -> None:
        super().__init__(reason)
        self.memory_bytes = memory_bytes


def _default_trial(
    build_model: Callable[[], keras.Model],
    make_dataset: Callable[[int], tf.data.Dataset],
    batch_size: int,
    steps: int,
    ceiling: _Ceiling | None,
    clock: Callable[[], float],
) -> _Measured:
    keras.backend.clear_session()  # also collects garbage (free_memory=True)
    if ceiling is None:
        seconds = _fit_at(build_model, make_dataset, batch_size, steps, clock)
        memory_bytes = None
    else:
        release_free_memory()
        with PeakAdded() as memory:
            seconds = _fit_at(build_model, make_dataset, batch_size, steps, clock)
        memory_bytes = memory.added
        peak = ceiling.search_start_bytes + memory_bytes
        if peak > ceiling.limit_bytes:
            raise _DoesNotFit(
                f"process RSS peaked at {peak:,} bytes counting this trial alone "
                f"({ceiling.search_start_bytes:,} at the search's start + {memory_bytes:,}), "
                f"over memory_limit_mib={ceiling.limit_bytes / 2**20:,.0f}",
                memory_bytes,
            )
    speed = batch_size * steps / seconds if seconds > 0 else math.inf
    return _Measured(speed, memory_bytes)


def _fit_at(
    build_model: Callable[[], keras.Model],
    make_dataset: Callable[[int], tf.data.Dataset],
    batch_size: int,
    steps: int,
    clock: Callable[[], float],
) -> float:
    """Seconds of one timed epoch of ``steps`` steps, on a fresh model, at ``batch_size``."""
    model = check_model(build_model(), returned_by="build_model")
    return _timed_fit(model, make_dataset(batch_size), steps=steps, repeats=1, clock=clock)[0]


def _check_search_arguments(
    min_batch_size: object,
    max_batch_size: object,
    steps: object,
    max_trials: object,
    memory_limit_mib: object,
    clock: object,
) -> None:
    """The numbers and the clock of :func:`find_batch_size`, in the order they are listed."""
    for name, value in (
        ("min_batch_size", min_batch_size),
        ("max_batch_size", max_batch_size),
        ("steps", steps),
        ("max_trials", max_trials),
    ):
        check_positive_int(name, value)
    if min_batch_size > max_batch_size:
        raise ValueError(
            "`min_batch_size` must not exceed `max_batch_size`. Received: "
            f"min_batch_size={min_batch_size}, max_batch_size={max_batch_size}"
        )
    check_positive_int("memory_limit_mib", memory_limit_mib, allow_none=True)
    check_callable("clock", clock)


def _trial_runner(
    build_model: Any,
    data: Any,
    trial: Any,
    steps: int,
    memory_limit_mib: int | None,
    clock: Callable[[], float],
) -> Callable[[int], Any]:
    """``trial`` itself (checked), or the default trial on ``build_model`` and ``data``; with a
    memory ceiling, the search's starting RSS is taken here, after freeing what can be freed."""
    if trial is not None:
        if not callable(trial):
            raise TypeError(
                f"`trial` must be a callable (batch_size -> examples/s or None). "
                f"Received: trial={trial!r}"
            )
        return trial
    if build_model is None or data is None:
        raise ValueError(
            "`build_model` and `data` are required unless `trial` is given. Received: "
            f"build_model={build_model!r}, data={data!r}"
        )
    if not callable(build_model):
        raise TypeError(
            "`build_model` must be a callable returning a compiled keras.Model. "
            f"Received: build_model={build_model!r}"
        )
    make_dataset = _dataset_maker(data)
    ceiling = None
    if memory_limit_mib is not None:
        keras.backend.clear_session()
        release_free_memory()
        ceiling = _Ceiling(memory_limit_mib * 2**20, rss())

    def run_trial(batch_size: int) -> _Measured:
        return _default_trial(build_model, make_dataset, batch_size, steps, ceiling, clock)

    return run_trial
