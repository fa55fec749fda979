"""tune's arguments in training mode, and the data ``fit`` takes, fed the same way to every
trial.

TensorFlow is never imported here: a ``tf.data.Dataset`` can only exist if the caller imported
TensorFlow already.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import keras
import numpy as np

from tfthroughput._validation import check_positive_int
from tfthroughput.data.keras_inputs import EndlessPyDataset, check_not_one_pass, is_py_dataset
from tfthroughput.tuning._arguments import (
    SearchArguments,
    already_batched_note,
    array_batches,
    check_bools,
    check_fraction,
    is_dataset,
    short_repr,
)
from tfthroughput.tuning.training.distribution import find_strategy


def _is_array(value: object) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and len(value.shape) > 0


def _leaves(value: object) -> list:
    return keras.tree.flatten(value)


@dataclass(frozen=True)
class TrainingData:
    """What ``fit`` takes, as given, and how each trial is fed from it: one subclass per kind
    of input (arrays, a ``tf.data.Dataset``, a ``PyDataset``), read once by
    :func:`training_data`.

    Attributes:
        value: ``(x, y)`` for arrays (``y`` is ``None`` when unlabeled), else the dataset.
        batch_size: Examples per batch; ``None`` for a batched dataset or a PyDataset.
        epoch_batches: Batches in one pass over the data, or ``None`` when unknown or infinite.
        sample_weight: Arrays given as ``(x, y, sample_weight)``: the weights, else ``None``.
    """

    value: Any
    batch_size: int | None
    epoch_batches: int | None
    sample_weight: Any = None
    # Why a larger batch cannot be tried, or None where it can.
    batch_note: ClassVar[str | None] = None
    # Whether the pipeline knob may rebuild it with build_pipeline (a PyDataset is the user's
    # Python code: measured, not rebuilt).
    rebuildable: ClassVar[bool] = True
    # Whether fit shuffles it every epoch by default (arrays): a rebuilt pipeline does too.
    shuffled_by_fit: ClassVar[bool] = False

    @property
    def examples(self) -> int | None:
        """Examples in the data, where known without reading it (arrays)."""
        return None

    @property
    def dataset(self) -> Any:
        """The ``tf.data.Dataset`` as given, or ``None``."""
        return None

    def feed(self, batch_size: int | None, steps: int) -> dict[str, Any]:
        """``fit`` arguments yielding at least ``steps`` batches, in the same order every time."""
        raise NotImplementedError

    def first_batch(self) -> tuple[Any, Any]:
        """The first batch's ``(x, y)``, as NumPy arrays (or tensors)."""
        raise NotImplementedError

    def replay_feed(self, batch_size: int | None, steps: int, most_bytes: int):
        """``fit`` arguments yielding the same ``steps`` batches on every pass, taken once
        from the input (at most ``most_bytes`` of them), or ``None`` and why not."""
        raise NotImplementedError

    def epoch_length(self, batch_size: int | None) -> int | None:
        """Steps in one pass at ``batch_size`` (``None``: no end, or unknown)."""
        return self.epoch_batches

    def epoch_feed(self, batch_size: int | None, *, endless: bool) -> dict[str, Any]:
        """``fit`` arguments of one epoch as the user feeds it (``endless``: repeated, for a
        length ``tf.data`` cannot tell)."""
        raise NotImplementedError

    def pipeline_source(self) -> Any:
        """What ``build_pipeline`` rebuilds the input from."""
        return self.dataset


class TrainingArrays(TrainingData):
    """NumPy arrays ``(x, y)`` (``x`` a list or dict of arrays for several inputs)."""

    shuffled_by_fit = True

    @property
    def examples(self) -> int:
        return len(_leaves(self.value[0])[0])

    def feed(self, batch_size: int | None, steps: int) -> dict[str, Any]:
        """Unshuffled and repeated, so every pass is the same."""
        repeats = max(1, math.ceil(steps * batch_size / self.examples))
        tile = lambda array: np.concatenate([np.asarray(array)] * repeats)  # noqa: E731
        return {**self._arrays(tile, batch_size), "shuffle": False}

    def first_batch(self) -> tuple[Any, Any]:
        x, y = self.value
        take = lambda array: np.asarray(array)[: self.batch_size]  # noqa: E731
        held = keras.tree.map_structure(take, x)
        return held, None if y is None else keras.tree.map_structure(take, y)

    def replay_feed(self, batch_size: int | None, steps: int, most_bytes: int):
        return self.feed(batch_size, steps), ""  # already the same on every pass

    def epoch_length(self, batch_size: int | None) -> int:
        return math.ceil(self.examples / batch_size)

    def epoch_feed(self, batch_size: int | None, *, endless: bool) -> dict[str, Any]:
        return self._arrays(lambda array: array, batch_size)

    def pipeline_source(self) -> Any:
        x, y = self.value
        # fit reads a list of arrays as several inputs; tf.data would stack it into one tensor
        source = as_tuples((x, y, self.sample_weight))
        if self.sample_weight is None and y is not None:
            return source[:2]
        if self.sample_weight is None:  # x alone, as fit(x) reads it; several inputs in a
            # 1-tuple, which fit reads as x (a 2-tuple of inputs would be read as (x, y))
            return (source[0],) if isinstance(source[0], tuple) else source[0]
        return source

    def _arrays(self, change: Callable[[Any], Any], batch_size: int | None) -> dict[str, Any]:
        x, y = self.value
        feed = {"x": keras.tree.map_structure(change, x), "batch_size": batch_size}
        if y is not None:  # unlabeled arrays are fed as x alone, as fit gets them
            feed["y"] = keras.tree.map_structure(change, y)
        if self.sample_weight is not None:
            feed["sample_weight"] = keras.tree.map_structure(change, self.sample_weight)
        return feed


class TrainingDataset(TrainingData):
    """A ``tf.data.Dataset``: batched (``batch_size`` ``None``), or unbatched with one."""

    @property
    def batch_note(self) -> str | None:
        return already_batched_note(self.batch_size)

    @property
    def dataset(self) -> Any:
        return self.value

    def feed(self, batch_size: int | None, steps: int) -> dict[str, Any]:
        return {"x": self._batched(batch_size).repeat(), "shuffle": False}

    def first_batch(self) -> tuple[Any, Any]:
        x, y, _ = keras.utils.unpack_x_y_sample_weight(next(iter(self._batched(self.batch_size))))
        return x, y

    def replay_feed(self, batch_size: int | None, steps: int, most_bytes: int):
        """Read once into an in-memory cache of its first ``steps`` batches."""
        size = sum(np.asarray(leaf).nbytes for leaf in keras.tree.flatten(self.first_batch()))
        if size * steps > most_bytes:
            mib = size * steps / 2**20
            return None, f"its first {steps} batches would hold {mib:.0f} MiB in memory"
        cached = self.feed(batch_size, steps)["x"].take(steps).cache()
        for _ in cached:  # the one read of the input: later passes come from the cache
            pass
        return {"x": cached.repeat(), "shuffle": False}, ""

    def epoch_length(self, batch_size: int | None) -> int | None:
        if self.batch_size is not None and self.epoch_batches is not None:
            return math.ceil(int(self.value.cardinality()) / batch_size)
        return self.epoch_batches

    def epoch_feed(self, batch_size: int | None, *, endless: bool) -> dict[str, Any]:
        dataset = self._batched(batch_size)  # shuffle=False: fit ignores it, with a warning
        return {"x": dataset.repeat() if endless else dataset, "shuffle": False}

    def _batched(self, batch_size: int | None) -> Any:
        return self.value if self.batch_size is None else self.value.batch(batch_size)


class TrainingPyDataset(TrainingData):
    """A ``keras.utils.PyDataset``: read by ``fit`` itself, with its workers, pass after pass."""

    batch_note = "batch size not tried: a PyDataset makes its own batches"
    rebuildable = False

    def feed(self, batch_size: int | None, steps: int) -> dict[str, Any]:
        endless = self.value.num_batches is not None
        return {"x": EndlessPyDataset(self.value) if endless else self.value, "shuffle": False}

    def first_batch(self) -> tuple[Any, Any]:
        x, y, _ = keras.utils.unpack_x_y_sample_weight(self.value[0])
        return x, y

    def replay_feed(self, batch_size: int | None, steps: int, most_bytes: int):
        return None, "a PyDataset is read as given"

    def epoch_feed(self, batch_size: int | None, *, endless: bool) -> dict[str, Any]:
        return {"x": self.value, "shuffle": False}

    def pipeline_source(self) -> Any:
        raise TypeError("a PyDataset is the user's Python code: it is not rebuilt")


def as_tuples(value: Any) -> Any:
    """``value`` with every list made a tuple: ``fit`` takes a list of arrays as several
    inputs, where ``tf.data.Dataset.from_tensor_slices`` would stack it into one tensor.

    Example:
        >>> as_tuples({"a": [1, [2, 3]]})
        {'a': (1, (2, 3))}
    """
    if isinstance(value, (list, tuple)):
        return tuple(as_tuples(item) for item in value)
    if isinstance(value, dict):
        return {key: as_tuples(item) for key, item in value.items()}
    return value


def training_data(data: object, batch_size: object) -> TrainingData:
    """Check ``data`` and ``batch_size`` and say how ``fit`` will read them.

    Raises:
        TypeError: If ``data`` is something ``fit`` cannot take, or ``batch_size`` is not an int.
        ValueError: If ``batch_size`` is missing or out of range for the kind of data.
    """
    batch_size = check_positive_int("batch_size", batch_size, allow_none=True)
    check_not_one_pass("data", data)
    if is_py_dataset(data):
        if batch_size is not None:
            raise ValueError(
                "`batch_size` must be None for a keras.utils.PyDataset: it makes its own "
                f"batches. Received: batch_size={batch_size}"
            )
        if data.num_batches == 0:
            raise ValueError(f"`data` has no batch. Received: data={short_repr(data)} (len 0)")
        return TrainingPyDataset(data, None, data.num_batches)
    if is_dataset(data):
        cardinality = int(data.cardinality())
        if batch_size is None:
            epoch = cardinality if cardinality > 0 else None
            return TrainingDataset(data, None, epoch)
        epoch = -(-cardinality // batch_size) if cardinality > 0 else None
        return TrainingDataset(data, int(batch_size), epoch)
    if _is_array(data) or (isinstance(data, dict) and data and all(map(_is_array, data.values()))):
        data = (data, None)  # x alone, unlabeled, as fit(x) takes it
    if isinstance(data, tuple) and len(data) in (2, 3) and data[0] is not None:
        x, y, weights = (*data, None)[:3]  # (x, y) or (x, y, sample_weight), as fit takes them
        leaves = [leaf for part in (x, y, weights) if part is not None for leaf in _leaves(part)]
        if leaves and all(_is_array(leaf) for leaf in leaves):
            examples, size = array_batches(leaves, batch_size)
            return TrainingArrays((x, y), size, examples // size, weights)
    raise TypeError(
        "`data` must be what model.fit takes: a tf.data.Dataset (batched, or unbatched with "
        "`batch_size`), a keras.utils.PyDataset, or NumPy arrays: a tuple (x, y) or "
        "(x, y, sample_weight), or x alone when unlabeled (with `batch_size`, default 32). "
        f"Received: data={short_repr(data)} of type {type(data).__name__}"
    )


@dataclass(frozen=True)
class TuneArguments(SearchArguments):
    """The arguments of ``tune`` in training mode, checked in the order they are listed,
    numbers normalised.

    ``tune`` hands all its arguments here first; a new argument of ``tune`` is a new field,
    checked in ``__post_init__`` (or in :class:`SearchArguments` where both modes take it).
    ``callbacks`` is checked where it is read (``tuning/_settings.py``); ``training`` is
    ``data`` as every trial gets it; ``strategy`` becomes the strategy the trials run under
    (given, or the caller's scope, or ``None``: ``tuning/training/distribution.py``).
    """

    callbacks: Any
    strategy: Any
    allow_batch_change: bool
    loss_tolerance: float
    steps_per_epoch: (
        Any  # checked where it is read (tuning/_settings.py, tuning/knobs/steps_per_execution.py)
    )
    training: TrainingData = field(init=False)

    def __post_init__(self) -> None:
        self.check_search()
        loss_tolerance = check_fraction("loss_tolerance", self.loss_tolerance)
        check_bools(self, "allow_batch_change")
        # Frozen: the normalised numbers and the training data are set once, here.
        object.__setattr__(self, "loss_tolerance", loss_tolerance)
        object.__setattr__(self, "training", training_data(self.data, self.batch_size))
        object.__setattr__(self, "strategy", find_strategy(self.strategy))
