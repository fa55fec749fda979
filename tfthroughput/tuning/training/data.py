"""tune's arguments in training mode, and the data ``fit`` takes, fed the same way to every
trial.

TensorFlow is never imported here: a ``tf.data.Dataset`` can only exist if the caller imported
TensorFlow already.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np

from tfthroughput._validation import check_positive_int
from tfthroughput.data.keras_inputs import EndlessPyDataset, check_not_one_pass, is_py_dataset
from tfthroughput.tuning._arguments import (
    ARRAYS,
    BATCHED,
    PY_DATASET,
    UNBATCHED,
    SearchArguments,
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
    """What ``fit`` takes, as given, and how each trial is fed from it.

    Attributes:
        kind: ``"arrays"``, ``"batched dataset"``, ``"unbatched dataset"`` or ``"PyDataset"``.
        value: ``(x, y)`` for arrays (``y`` is ``None`` when unlabeled), else the dataset.
        batch_size: Examples per batch; ``None`` for a batched dataset or a PyDataset.
        epoch_batches: Batches in one pass over the data, or ``None`` when unknown or infinite.
        sample_weight: Arrays given as ``(x, y, sample_weight)``: the weights, else ``None``.
    """

    kind: str
    value: Any
    batch_size: int | None
    epoch_batches: int | None
    sample_weight: Any = None

    @property
    def examples(self) -> int | None:
        """Examples in the arrays; ``None`` for a dataset."""
        return len(_leaves(self.value[0])[0]) if self.kind == ARRAYS else None

    def feed(self, batch_size: int | None, steps: int) -> dict[str, Any]:
        """``fit`` arguments yielding at least ``steps`` batches, in the same order every time
        (arrays unshuffled and repeated, datasets repeated)."""
        if self.kind == ARRAYS:
            x, y = self.value
            examples = len(_leaves(x)[0])
            repeats = max(1, math.ceil(steps * batch_size / examples))
            tile = lambda array: np.concatenate([np.asarray(array)] * repeats)  # noqa: E731
            feed = {"x": keras.tree.map_structure(tile, x), "batch_size": batch_size}
            if y is not None:  # unlabeled arrays are fed as x alone, as fit gets them
                feed["y"] = keras.tree.map_structure(tile, y)
            if self.sample_weight is not None:
                feed["sample_weight"] = keras.tree.map_structure(tile, self.sample_weight)
            return {**feed, "shuffle": False}
        if self.kind == PY_DATASET:  # read by fit itself, with its workers, pass after pass
            endless = self.value.num_batches is not None
            return {"x": EndlessPyDataset(self.value) if endless else self.value, "shuffle": False}
        dataset = self.value if self.kind == BATCHED else self.value.batch(batch_size)
        return {"x": dataset.repeat(), "shuffle": False}

    def first_batch(self) -> tuple[Any, Any]:
        """The first batch, as NumPy arrays (or tensors), for the compute-only probe."""
        if self.kind == ARRAYS:
            x, y = self.value
            take = lambda array: np.asarray(array)[: self.batch_size]  # noqa: E731
            held = keras.tree.map_structure(take, x)
            return held, None if y is None else keras.tree.map_structure(take, y)
        if self.kind == PY_DATASET:
            x, y, _ = keras.utils.unpack_x_y_sample_weight(self.value[0])
            return x, y
        dataset = self.value if self.kind == BATCHED else self.value.batch(self.batch_size)
        batch = next(iter(dataset))
        x, y, _ = keras.utils.unpack_x_y_sample_weight(batch)
        return x, y


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
        return TrainingData(PY_DATASET, data, None, data.num_batches)
    if is_dataset(data):
        cardinality = int(data.cardinality())
        if batch_size is None:
            epoch = cardinality if cardinality > 0 else None
            return TrainingData(BATCHED, data, None, epoch)
        epoch = -(-cardinality // batch_size) if cardinality > 0 else None
        return TrainingData(UNBATCHED, data, int(batch_size), epoch)
    if _is_array(data) or (isinstance(data, dict) and data and all(map(_is_array, data.values()))):
        data = (data, None)  # x alone, unlabeled, as fit(x) takes it
    if isinstance(data, tuple) and len(data) in (2, 3) and data[0] is not None:
        x, y, weights = (*data, None)[:3]  # (x, y) or (x, y, sample_weight), as fit takes them
        leaves = [leaf for part in (x, y, weights) if part is not None for leaf in _leaves(part)]
        if leaves and all(_is_array(leaf) for leaf in leaves):
            examples, size = array_batches(leaves, batch_size)
            return TrainingData(ARRAYS, (x, y), size, examples // size, weights)
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
