"""tune's arguments in inference mode, and the data ``predict`` takes, checked once and fed the
same way to every inference trial.

Arrays (one array, a list or dict of arrays; a tuple ``(x, y)`` as ``predict`` reads it, ``y``
ignored) or a ``tf.data.Dataset`` (batched, or unbatched with ``batch_size``). Every trial
predicts the same examples in the same order, so outputs can be compared row by row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import keras
import numpy as np

from tfthroughput._validation import check_positive_int, leading_dimension
from tfthroughput.tuning._arguments import (
    SearchArguments,
    already_batched_note,
    array_batches,
    check_fraction,
    check_positive_amount,
    is_dataset,
    short_repr,
)

# Relative difference of outputs allowed for knobs that change the arithmetic (XLA, the
# batch size, the dtype policy): bfloat16 keeps 8 bits of mantissa (0.4 % per rounding), and
# a few layers of it stay within 2 % of the largest output.
DEFAULT_OUTPUT_TOLERANCE = 0.02
# Examples whose outputs every trial computes for the output check (fewer if the data has
# fewer): enough rows to meet every kernel of the model, cheap next to the timed runs.
CHECK_EXAMPLES = 256


@dataclass(frozen=True)
class InferenceData:
    """What ``predict`` takes, as given: one subclass per kind of input (arrays, a
    ``tf.data.Dataset``), read once by :func:`inference_data`.

    Attributes:
        value: The inputs ``x`` (arrays) or the dataset.
        batch_size: Examples per batch; ``None`` for a batched dataset.
        examples: Examples in the arrays; ``None`` for a dataset.
    """

    value: Any
    batch_size: int | None
    examples: int | None = None
    batch_note: ClassVar[str | None] = None  # why a larger batch cannot be tried

    def feed(self, batch_size: int | None, num_batches: int) -> dict[str, Any]:
        """``predict`` arguments for ``num_batches`` batches of ``batch_size`` examples,
        the same examples in the same order every time."""
        raise NotImplementedError

    def one_batch(self, batch_size: int | None) -> Any:
        """The inputs of the first batch, for ``predict_on_batch``."""
        raise NotImplementedError

    def check_feed(self, batch_size: int | None) -> dict[str, Any]:
        """``predict`` arguments for the examples of the output check, in ``batch_size``
        batches (the last one may be partial)."""
        raise NotImplementedError

    def whole_feed(self, batch_size: int | None, most: float) -> tuple[dict[str, Any], bool]:
        """``predict`` arguments for the data as given at ``batch_size``, and whether that is
        all of it: the first ``most`` examples (at least a batch) where it holds more, or where
        a dataset does not end or its length is unknown."""
        raise NotImplementedError

    def batch_examples(self) -> int:
        """Examples in one batch as given (the first batch of a batched dataset)."""
        if self.batch_size is not None:
            return self.batch_size
        return leading_dimension(self.one_batch(None))


class InferenceArrays(InferenceData):
    """NumPy arrays: one, a list or a dict of them."""

    def feed(self, batch_size: int | None, num_batches: int) -> dict[str, Any]:
        """Repeated as needed."""
        wanted = num_batches * batch_size
        repeats = max(1, math.ceil(wanted / self.examples))

        def take(array: Any) -> np.ndarray:
            array = np.asarray(array)
            if repeats > 1:
                array = np.concatenate([array] * repeats)
            return array[:wanted]

        return {"x": keras.tree.map_structure(take, self.value), "batch_size": batch_size}

    def one_batch(self, batch_size: int | None) -> Any:
        return self.feed(batch_size, 1)["x"]

    def check_feed(self, batch_size: int | None) -> dict[str, Any]:
        return self._first(min(self.examples, CHECK_EXAMPLES), batch_size)

    def whole_feed(self, batch_size: int | None, most: float) -> tuple[dict[str, Any], bool]:
        keep = max(batch_size, int(most))
        if keep >= self.examples:
            return {"x": self.value, "batch_size": batch_size}, True
        return self._first(keep, batch_size), False

    def _first(self, count: int, batch_size: int | None) -> dict[str, Any]:
        take = lambda array: np.asarray(array)[:count]  # noqa: E731
        return {"x": keras.tree.map_structure(take, self.value), "batch_size": batch_size}


class InferenceDataset(InferenceData):
    """A ``tf.data.Dataset``: batched (``batch_size`` ``None``), or unbatched with one."""

    @property
    def batch_note(self) -> str | None:
        return already_batched_note(self.batch_size)

    def feed(self, batch_size: int | None, num_batches: int) -> dict[str, Any]:
        return {"x": self._batched(batch_size).repeat(), "steps": num_batches}

    def one_batch(self, batch_size: int | None) -> Any:
        x, _, _ = keras.utils.unpack_x_y_sample_weight(next(iter(self._batched(batch_size))))
        return x

    def check_feed(self, batch_size: int | None) -> dict[str, Any]:
        if self.batch_size is not None:
            return {"x": self.value.take(CHECK_EXAMPLES).batch(batch_size)}
        batches = max(1, CHECK_EXAMPLES // max(1, self.batch_examples()))
        return {"x": self.value.take(batches)}

    def whole_feed(self, batch_size: int | None, most: float) -> tuple[dict[str, Any], bool]:
        dataset = self._batched(batch_size)
        per_batch = batch_size if batch_size is not None else self.batch_examples()
        allowed = max(1, int(most // per_batch))
        batches = int(dataset.cardinality())
        if 0 <= batches <= allowed:
            return {"x": dataset}, True
        return {"x": dataset.take(allowed)}, False

    def _batched(self, batch_size: int | None) -> Any:
        return self.value if self.batch_size is None else self.value.batch(batch_size)


def inference_data(data: object, batch_size: object) -> InferenceData:
    """Check ``data`` and ``batch_size`` and say how ``predict`` will read them.

    Raises:
        TypeError: If ``data`` is something ``predict`` cannot take, or ``batch_size`` is not
            an int.
        ValueError: If ``batch_size`` is out of range, or given for a batched dataset.
    """
    batch_size = check_positive_int("batch_size", batch_size, allow_none=True)
    if is_dataset(data):
        if batch_size is None:
            return InferenceDataset(data, None)
        return InferenceDataset(data, int(batch_size))
    x = data[0] if isinstance(data, tuple) and len(data) in (2, 3) else data
    leaves = keras.tree.flatten(x) if x is not None else []
    if leaves and all(hasattr(v, "shape") and len(v.shape) > 0 for v in leaves):
        examples, size = array_batches(leaves, batch_size)
        return InferenceArrays(x, size, examples)
    raise TypeError(
        "`data` must be what model.predict takes: NumPy arrays (one, a list or a dict; with "
        "`batch_size`, default 32) or a tf.data.Dataset (batched, or unbatched with "
        f"`batch_size`). Received: data={short_repr(data)} of type {type(data).__name__}"
    )


@dataclass(frozen=True)
class InferenceArguments(SearchArguments):
    """tune's arguments in inference mode, checked in the order listed (after
    :class:`SearchArguments`'s), numbers normalised; ``inputs`` is ``data`` as every trial's
    ``predict`` gets it."""

    max_batch_latency_ms: float | None
    output_tolerance: float | None
    inputs: InferenceData = field(init=False)

    def __post_init__(self) -> None:
        self.check_search()
        limit = check_positive_amount(
            "max_batch_latency_ms", self.max_batch_latency_ms, "milliseconds", allow_none=True
        )
        tolerance = self.output_tolerance
        tolerance = (
            DEFAULT_OUTPUT_TOLERANCE
            if tolerance is None
            else check_fraction("output_tolerance", tolerance)
        )
        for name, value in (
            ("max_batch_latency_ms", limit),
            ("output_tolerance", tolerance),
            ("inputs", inference_data(self.data, self.batch_size)),
        ):
            object.__setattr__(self, name, value)
