"""tune's argument checks that both modes run, the arguments both modes take
(:class:`SearchArguments`).

Each mode's own arguments live with the data it reads (``training.data.TuneArguments``,
``inference.data.InferenceArguments``); which mode runs is ``tuner``'s rule. Each check
names the argument and the value received. TensorFlow is never imported here: a
``tf.data.Dataset`` can only exist if the caller imported TensorFlow already.
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass
from typing import Any

import keras

from tfthroughput._validation import check_callable, check_positive_int


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


def check_positive_amount(
    name: str, value: object, unit: str, *, allow_none: bool = False
) -> float | None:
    """``value`` as a float: a positive, finite number of ``unit`` (or ``None`` where
    ``allow_none``)."""
    if value is None and allow_none:
        return None
    either = "None or " if allow_none else ""
    expected = f"`{name}` must be {either}a positive number of {unit}. Received: {name}={value!r}"
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
    """``rounds``, already a positive int, is at least 2: a comparison needs two rounds to start."""
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


def short_repr(value: object) -> str:
    """``repr(value)``, cut to 80 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class SearchArguments:
    """The arguments every mode of ``tune`` takes; a mode's class adds its own and checks
    them after :meth:`check_search`. ``precision`` is checked where it is read
    (``tuning/_settings.py``)."""

    build_model: Any
    data: Any
    batch_size: Any
    time_budget: float
    steps: int
    rounds: int
    confirm_rounds: int
    precision: Any
    pipeline: bool
    xla: bool
    max_steps_per_execution: int
    seed: int
    log_dir: str | None
    clock: Any

    def check_search(self) -> None:
        """The checks every mode runs first, ``time_budget`` normalised (frozen: set here)."""
        check_builder(self.build_model)
        budget = check_positive_amount("time_budget", self.time_budget, "seconds")
        object.__setattr__(self, "time_budget", budget)
        check_positive_int("steps", self.steps)
        check_positive_int("rounds", self.rounds)
        check_rounds(self.rounds)
        check_confirm_rounds(self.confirm_rounds)
        check_positive_int("max_steps_per_execution", self.max_steps_per_execution)
        check_seed(self.seed)
        check_bools(self, "pipeline", "xla")
        check_callable("clock", self.clock)


def check_bools(arguments: object, *names: str) -> None:
    """The attributes ``names`` of ``arguments`` are bools."""
    for name in names:
        value = getattr(arguments, name)
        if not isinstance(value, bool):
            raise TypeError(f"`{name}` must be a bool. Received: {name}={value!r}")


def already_batched_note(batch_size: int | None) -> str | None:
    """Why a dataset's batch size is not tried: it came batched (``batch_size`` ``None``)."""
    if batch_size is None:
        return (
            "batch size not tried: the dataset is already batched (pass it unbatched, "
            "with batch_size, to let tune try larger batches)"
        )
    return None
