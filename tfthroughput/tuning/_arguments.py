"""tune's argument checks, and the data ``fit`` takes, fed the same way to every trial.

Each check names the argument and the value received. TensorFlow is never imported here: a
``tf.data.Dataset`` can only exist if the caller imported TensorFlow already.
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np

from tfthroughput._validation import check_callable, check_positive_int
from tfthroughput.data.keras_inputs import EndlessPyDataset, check_not_one_pass, is_py_dataset
from tfthroughput.tuning.distribution import find_strategy

ARRAYS = "arrays"
BATCHED = "batched dataset"
UNBATCHED = "unbatched dataset"
PY_DATASET = "PyDataset"


def is_dataset(value: object) -> bool:
    """Whether ``value`` is a ``tf.data.Dataset`` (without importing TensorFlow)."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(value, tf.data.Dataset)


def check_builder(build_model: object) -> None:
    if isinstance(build_model, keras.Model):
        raise TypeError(
            "`build_model` must be a zero-argument function that returns a new compiled "
            "keras.Model, not a model (each trial needs a fresh one, built under its own "
            f"precision policy): pass e.g. `lambda: make_model()`. Received: "
            f"build_model={build_model.name!r} (a {type(build_model).__name__})"
        )
    if not callable(build_model):
        raise TypeError(
            "`build_model` must be a zero-argument function that returns a new compiled "
            f"keras.Model. Received: build_model={build_model!r}"
        )


def check_positive_seconds(name: str, value: object) -> float:
    expected = f"`{name}` must be a positive number of seconds. Received: {name}={value!r}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(expected)
    if not value > 0 or math.isinf(value):
        raise ValueError(expected)
    return float(value)


def check_fraction(name: str, value: object) -> float:
    expected = f"`{name}` must be a number between 0 and 1. Received: {name}={value!r}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(expected)
    if not 0 < value < 1:
        raise ValueError(expected)
    return float(value)


def check_rounds(rounds: int) -> None:
    """``rounds``, already a positive int, is at least 2: the noise needs two rounds."""
    if rounds < 2:
        raise ValueError(
            f"`rounds` must be at least 2 (the noise is the spread between rounds). "
            f"Received: rounds={rounds}"
        )


def check_confirm_rounds(confirm_rounds: object) -> None:
    """``confirm_rounds`` is an int of at least 5: the confirmation decides the headline, so its
    verdict rests on most of 5 rounds at least (a descheduled run can sway 2 of 3)."""
    check_positive_int("confirm_rounds", confirm_rounds)
    if confirm_rounds < 5:
        raise ValueError(
            "`confirm_rounds` must be at least 5 (the confirmation's verdict decides what "
            f"tune hands back). Received: confirm_rounds={confirm_rounds}"
        )


def check_seed(seed: object) -> None:
    """``seed`` is a non-negative int (a bool is not)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TypeError(f"`seed` must be a non-negative int. Received: seed={seed!r}")


def array_batches(leaves: list, batch_size: object) -> tuple[int, int]:
    """The examples in arrays of ``data`` (``leaves``: all of them) and the batch size read
    from them (``batch_size``, or 32 as ``fit`` and ``predict`` default to).

    Raises:
        ValueError: If the arrays differ in length, or the batch exceeds the examples.
    """
    lengths = {int(leaf.shape[0]) for leaf in leaves}
    if len(lengths) != 1:
        raise ValueError(
            "`data` arrays must all have the same number of examples (first axis). "
            f"Received lengths {sorted(lengths)}"
        )
    examples = lengths.pop()
    size = 32 if batch_size is None else int(batch_size)
    if size > examples:
        raise ValueError(
            f"`batch_size` must not exceed the {examples} examples in `data`. "
            f"Received: batch_size={size}"
        )
    return examples, size


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
    """

    kind: str
    value: Any
    batch_size: int | None
    epoch_batches: int | None

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
            raise ValueError(f"`data` has no batch. Received: data={_short(data)} (len 0)")
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
    if isinstance(data, tuple) and len(data) == 2 and data[0] is not None:
        x, y = data
        leaves = _leaves(x) + ([] if y is None else _leaves(y))
        if leaves and all(_is_array(leaf) for leaf in leaves):
            examples, size = array_batches(leaves, batch_size)
            return TrainingData(ARRAYS, (x, y), size, examples // size)
    raise TypeError(
        "`data` must be what model.fit takes: a tf.data.Dataset (batched, or unbatched with "
        "`batch_size`), a keras.utils.PyDataset, or NumPy arrays: a tuple (x, y), or x alone "
        "when unlabeled (with `batch_size`, default 32). "
        f"Received: data={_short(data)} of type {type(data).__name__}"
    )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class SearchArguments:
    """The arguments every mode of ``tune`` starts with, in the order of its signature."""

    build_model: Any
    data: Any
    batch_size: Any
    time_budget: float
    steps: int
    rounds: int
    confirm_rounds: int

    def check_search(self) -> None:
        """The checks every mode runs first, ``time_budget`` normalised (frozen: set here)."""
        check_builder(self.build_model)
        budget = check_positive_seconds("time_budget", self.time_budget)
        object.__setattr__(self, "time_budget", budget)
        check_positive_int("steps", self.steps)
        check_positive_int("rounds", self.rounds)
        check_rounds(self.rounds)
        check_confirm_rounds(self.confirm_rounds)


@dataclass(frozen=True)
class TuneArguments(SearchArguments):
    """The arguments of ``tune``, checked in the order they are listed, numbers normalised.

    ``tune`` hands all its arguments here first; a new argument of ``tune`` is a new field,
    checked in ``__post_init__``. ``callbacks`` and ``precision`` are checked where they are
    read (``tuning/_settings.py``); ``training`` is ``data`` as every trial gets it;
    ``strategy`` becomes the strategy the trials run under (given, or the caller's scope, or
    ``None``: ``tuning/distribution.py``).
    """

    callbacks: Any
    strategy: Any
    precision: Any
    pipeline: bool
    xla: bool
    allow_batch_change: bool
    max_steps_per_execution: int
    loss_tolerance: float
    seed: int
    log_dir: str | None
    clock: Any
    steps_per_epoch: Any  # checked where it is read (tuning/_settings.py, tuning/_epoch.py)
    training: TrainingData = field(init=False)

    def __post_init__(self) -> None:
        self.check_search()
        check_positive_int("max_steps_per_execution", self.max_steps_per_execution)
        loss_tolerance = check_fraction("loss_tolerance", self.loss_tolerance)
        check_seed(self.seed)
        for name in ("pipeline", "xla", "allow_batch_change"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"`{name}` must be a bool. Received: {name}={value!r}")
        check_callable("clock", self.clock)
        # Frozen: the normalised numbers and the training data are set once, here.
        object.__setattr__(self, "loss_tolerance", loss_tolerance)
        object.__setattr__(self, "training", training_data(self.data, self.batch_size))
        object.__setattr__(self, "strategy", find_strategy(self.strategy))
