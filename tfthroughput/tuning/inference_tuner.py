"""``tune(..., mode="inference")``: make ``model.predict`` faster on the user's own model, with
the same outputs. ``tune`` checks the mode (:func:`check_mode`) and hands its arguments to
:func:`tune_inference`; :class:`InferenceArguments` checks them, as ``TuneArguments`` does
for training."""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras

from tfthroughput._validation import check_callable, check_positive_int
from tfthroughput.tuning._arguments import (
    SearchArguments,
    check_fraction,
    check_seed,
)
from tfthroughput.tuning._engine import run_search
from tfthroughput.tuning._inference_data import InferenceData, inference_data
from tfthroughput.tuning._inference_workload import InferenceWorkload
from tfthroughput.tuning._settings import inference_settings
from tfthroughput.tuning.confirmation import CONFIRM_ROUNDS
from tfthroughput.tuning.inference_result import InferenceTuneResult

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
    """tune's arguments without those of inference, and those (``None`` in training mode).

    Raises:
        ValueError: As :func:`check_mode`.
    """
    given = dict(arguments)
    inference = {name: given.pop(name) for name in INFERENCE_ONLY}
    mode = inference.pop("mode")
    return given, (inference if check_mode(mode, {**given, **inference}) else None)


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


def tune_inference(
    build_model: Callable[[], keras.Model],
    data: Any,
    *,
    batch_size: int | None = None,
    time_budget: float = 180.0,
    steps: int = 128,
    rounds: int = 3,
    confirm_rounds: int = CONFIRM_ROUNDS,
    precision: Any = None,
    pipeline: bool = True,
    xla: bool = True,
    max_steps_per_execution: int = 1024,
    seed: int = 0,
    log_dir: str | None = None,
    clock: Callable[[], float] = time.perf_counter,
    max_batch_latency_ms: float | None = None,
    output_tolerance: float | None = None,
    **training_only: Any,
) -> InferenceTuneResult:
    """Measure ``predict``'s knobs on fresh copies of a model and choose the fastest setup.

    ``tune(build_model, x, mode="inference", ...)`` calls this with its arguments (those of
    training only, ``training_only``, were checked unset by :func:`check_mode`). The baseline
    is ``predict`` as given; then the batch size (doubling), XLA flipped,
    ``steps_per_execution`` (doubling) and the recommended dtype policy, each on the best
    setup so far, measured against the baseline in alternated rounds, with the per-batch
    latency and the outputs checked (``tuning/_inference_knobs.py``; the docs' page "Tune:
    inference"). ``pipeline`` only adds a note: the input is ``diagnose``'s to measure.

    Returns:
        A frozen :class:`~tfthroughput.tuning.InferenceTuneResult`.

    Raises:
        TypeError, ValueError: For invalid arguments, naming the argument and the value.
        RuntimeError: If ``predict`` fails on the model as given.

    Example:
        >>> result = tune_inference(build_model, x_test, max_batch_latency_ms=50)  # doctest: +SKIP
        >>> model.predict(x_test, **result.predict_kwargs)  # doctest: +SKIP
    """
    given = {name: value for name, value in locals().items() if name != "training_only"}
    arguments = InferenceArguments(**given)
    settings = inference_settings(arguments)
    inputs, clock = arguments.inputs, arguments.clock
    result = run_search(InferenceWorkload, build_model, inputs, settings, clock)
    if log_dir is not None:
        result.write_to_tensorboard(log_dir)
    return result
