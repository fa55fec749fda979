"""``tune``'s mode and its arguments in inference mode: ``tune`` checks the mode
(:func:`split_mode`), and :class:`InferenceArguments` checks the arguments of
``tune(..., mode="inference")``, as ``TuneArguments`` does for training."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from tfthroughput._validation import check_callable, check_positive_int
from tfthroughput.tuning._arguments import (
    SearchArguments,
    check_fraction,
    check_seed,
)
from tfthroughput.tuning._inference_data import InferenceData, inference_data

# Relative difference of outputs allowed for knobs that change the arithmetic (XLA, the
# batch size, the dtype policy): bfloat16 keeps 8 bits of mantissa (0.4 % per rounding), and
# a few layers of it stay within 2 % of the largest output.
DEFAULT_OUTPUT_TOLERANCE = 0.02
TRAINING = "training"
INFERENCE = "inference"
# tune's arguments for inference only; and those for training only, with their defaults.
INFERENCE_ONLY = ("mode", "max_batch_latency_ms", "output_tolerance")
TRAINING_ONLY = {
    "steps_per_epoch": None,
    "callbacks": None,
    "strategy": None,
    "allow_batch_change": False,
    "loss_tolerance": 0.05,
}


def check_mode(mode: object, given: dict[str, Any]) -> bool:
    """Whether ``tune`` runs in inference mode; ``given`` holds tune's other arguments.

    Raises:
        ValueError: If ``mode`` is unknown, or an argument of the other mode is set.
    """
    if mode not in (TRAINING, INFERENCE):
        raise ValueError(f'`mode` must be "{TRAINING}" or "{INFERENCE}". Received: mode={mode!r}')
    if mode == INFERENCE:
        for name, default in TRAINING_ONLY.items():
            if given[name] != default:
                raise ValueError(
                    f'`{name}` applies to mode="training" only (mode="inference" trains '
                    f"nothing). Received: {name}={given[name]!r}"
                )
        return True
    for name in INFERENCE_ONLY[1:]:
        if given[name] is not None:
            raise ValueError(
                f'`{name}` applies to mode="inference" only. Received: {name}={given[name]!r}'
            )
    return False


def split_mode(arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """tune's arguments for ``TuneArguments``, and, in inference mode, those for
    :class:`InferenceArguments` (``None`` in training mode).

    Raises:
        ValueError: As :func:`check_mode`.
    """
    given = dict(arguments)
    inference = {name: given.pop(name) for name in INFERENCE_ONLY}
    mode = inference.pop("mode")
    if not check_mode(mode, {**given, **inference}):
        return given, None
    shared = {name: value for name, value in given.items() if name not in TRAINING_ONLY}
    return given, {**shared, **inference}


def check_latency_limit(max_batch_latency_ms: object) -> float | None:
    """``None`` or a positive number of milliseconds."""
    if max_batch_latency_ms is None:
        return None
    expected = (
        "`max_batch_latency_ms` must be None or a positive number of milliseconds. "
        f"Received: max_batch_latency_ms={max_batch_latency_ms!r}"
    )
    if isinstance(max_batch_latency_ms, bool) or not isinstance(max_batch_latency_ms, numbers.Real):
        raise TypeError(expected)
    if not max_batch_latency_ms > 0 or math.isinf(max_batch_latency_ms):
        raise ValueError(expected)
    return float(max_batch_latency_ms)


@dataclass(frozen=True)
class InferenceArguments(SearchArguments):
    """tune's arguments in inference mode, checked in the order listed, numbers normalised;
    ``inputs`` is ``data`` as every trial's ``predict`` gets it."""

    precision: Any
    pipeline: bool
    xla: bool
    max_steps_per_execution: int
    seed: int
    log_dir: str | None
    clock: Any
    max_batch_latency_ms: float | None
    output_tolerance: float | None
    inputs: InferenceData = field(init=False)

    def __post_init__(self) -> None:
        self.check_search()
        check_positive_int("max_steps_per_execution", self.max_steps_per_execution)
        limit = check_latency_limit(self.max_batch_latency_ms)
        tolerance = self.output_tolerance
        tolerance = (
            DEFAULT_OUTPUT_TOLERANCE
            if tolerance is None
            else check_fraction("output_tolerance", tolerance)
        )
        check_seed(self.seed)
        if not isinstance(self.xla, bool):
            raise TypeError(f"`xla` must be a bool. Received: xla={self.xla!r}")
        check_callable("clock", self.clock)
        for name, value in (
            ("max_batch_latency_ms", limit),
            ("output_tolerance", tolerance),
            ("inputs", inference_data(self.data, self.batch_size)),
        ):
            object.__setattr__(self, name, value)
