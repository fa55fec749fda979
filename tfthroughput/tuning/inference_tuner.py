"""``tune(..., mode="inference")``: make ``model.predict`` faster on the user's own model, with
the same outputs. :func:`tune_inference` runs it; ``tune`` checks the arguments it shares."""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable
from typing import Any

import keras

from tfthroughput._validation import check_positive_int
from tfthroughput.tuning._arguments import check_builder, check_fraction, check_positive_seconds
from tfthroughput.tuning._environment import clear_session, gpu_sampler, policy_to_try
from tfthroughput.tuning._inference_data import inference_data
from tfthroughput.tuning._inference_search import InferenceSearch, InferenceSettings
from tfthroughput.tuning._measure import GPUWindows
from tfthroughput.tuning.inference_result import InferenceTuneResult

# Relative difference of outputs allowed for knobs that change the arithmetic (XLA, the
# batch size, the dtype policy): bfloat16 keeps 8 bits of mantissa (0.4 % per rounding), and
# a few layers of it stay within 2 % of the largest output.
DEFAULT_OUTPUT_TOLERANCE = 0.02


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


def tune_inference(
    build_model: Callable[[], keras.Model],
    data: Any,
    *,
    batch_size: int | None = None,
    time_budget: float = 180.0,
    steps: int = 128,
    rounds: int = 3,
    precision: Any = None,
    xla: bool = True,
    max_steps_per_execution: int = 1024,
    max_batch_latency_ms: float | None = None,
    output_tolerance: float | None = None,
    seed: int = 0,
    log_dir: str | None = None,
    clock: Callable[[], float] = time.perf_counter,
    notes: tuple[str, ...] = (),
) -> InferenceTuneResult:
    """Measure ``predict``'s knobs on fresh copies of a model and choose the fastest setup.

    ``tune(build_model, x, mode="inference", ...)`` calls this; see
    :func:`tfthroughput.tune` for the arguments it shares. The baseline is ``predict`` as
    given; then the batch size (doubling), XLA flipped, ``steps_per_execution`` (doubling)
    and the recommended dtype policy, each on the best setup so far, measured against the
    baseline in alternated rounds. Every trial predicts the same examples from a model built
    from the same seed; its outputs must match the baseline's within
    ``EXACT_OUTPUT_TOLERANCE`` (``steps_per_execution`` alone) or ``output_tolerance``.

    Args:
        build_model: Zero-argument function returning a new ``keras.Model`` with its weights
            (compiled or not), called once per trial under the trial's dtype policy.
        data: What ``predict`` takes: arrays (one, a list or dict) or a ``tf.data.Dataset``.
        batch_size: The batch ``predict`` is called with (default ``None``: 32 for arrays;
            required for an unbatched dataset, ``None`` for a batched one).
        time_budget: Seconds the search may take. Defaults to ``180``.
        steps: Batches of the baseline's timed run (doubled until it lasts 0.1 s). Defaults
            to ``128``. Larger batches keep the same examples per run.
        rounds: Alternated rounds per trial, at least 2. Defaults to ``3``.
        precision: As for ``tune``: ``None``, a ``PrecisionRecommendation`` or ``False``.
        xla: Whether to try ``jit_compile`` flipped. Defaults to ``True``.
        max_steps_per_execution: Largest ``steps_per_execution`` tried. Defaults to ``1024``.
        max_batch_latency_ms: Largest p95 latency of one batch (one ``predict_on_batch``
            call), in milliseconds; a setup over it is never chosen and ends the batch
            doubling. Defaults to ``None``: no limit.
        output_tolerance: Largest difference of outputs, relative to the largest output,
            allowed for knobs that change the arithmetic. Defaults to ``None``: ``0.02``.
        seed: Seed set before every model is built. Defaults to ``0``.
        log_dir: Where to write the table to TensorBoard's Text tab (tag ``tune/inference``).
        clock: Seconds clock. Defaults to ``time.perf_counter``.
        notes: Notes from the caller, shown with the result's.

    Returns:
        A frozen :class:`~tfthroughput.tuning.InferenceTuneResult`.

    Raises:
        TypeError, ValueError: For invalid arguments, naming the argument and the value.
        RuntimeError: If ``predict`` fails on the model as given.

    Example:
        >>> result = tune_inference(build_model, x_test, max_batch_latency_ms=50)  # doctest: +SKIP
        >>> model.predict(x_test, **result.predict_kwargs)  # doctest: +SKIP
    """
    check_builder(build_model)
    time_budget = check_positive_seconds("time_budget", time_budget)
    for name, value in (("steps", steps), ("rounds", rounds)):
        check_positive_int(name, value)
    if rounds < 2:
        raise ValueError(
            f"`rounds` must be at least 2 (the noise is the spread between rounds). "
            f"Received: rounds={rounds}"
        )
    check_positive_int("max_steps_per_execution", max_steps_per_execution)
    limit = check_latency_limit(max_batch_latency_ms)
    tolerance = (
        DEFAULT_OUTPUT_TOLERANCE
        if output_tolerance is None
        else check_fraction("output_tolerance", output_tolerance)
    )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TypeError(f"`seed` must be a non-negative int. Received: seed={seed!r}")
    if not isinstance(xla, bool):
        raise TypeError(f"`xla` must be a bool. Received: xla={xla!r}")
    if not callable(clock):
        raise TypeError(f"`clock` must be callable. Received: clock={clock!r}")
    given = inference_data(data, batch_size)
    notes = list(notes)
    policy = policy_to_try(precision, notes)
    if xla and keras.backend.backend() == "jax":
        xla = False
        notes.append("XLA not flipped: JAX compiles predict with XLA already")
    settings = InferenceSettings(
        steps=steps,
        rounds=rounds,
        time_budget=time_budget,
        output_tolerance=tolerance,
        seed=seed,
        max_steps_per_execution=max_steps_per_execution,
        max_batch_latency_ms=limit,
        policy=policy,
        try_xla=xla,
        notes=tuple(notes),
    )
    policy_in_force = keras.config.dtype_policy()
    clear_session(policy_in_force)
    sampler = gpu_sampler()
    try:
        result = InferenceSearch(build_model, given, settings, clock, GPUWindows(sampler)).run()
    finally:
        if sampler is not None:
            sampler.stop()
        clear_session(policy_in_force)
    if log_dir is not None:
        result.write_to_tensorboard(log_dir)
    return result


TRAINING = "training"
INFERENCE = "inference"
# tune's arguments that only training uses, with their defaults.
TRAINING_ONLY = {"callbacks": None, "allow_batch_change": False, "loss_tolerance": 0.05}


def check_mode(mode: object, given: dict[str, Any]) -> bool:
    """Whether ``tune`` runs in inference mode; ``given`` holds the mode-specific arguments.

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
    for name in ("max_batch_latency_ms", "output_tolerance"):
        if given[name] is not None:
            raise ValueError(
                f'`{name}` applies to mode="inference" only. Received: {name}={given[name]!r}'
            )
    return False


def inference_notes(pipeline: bool) -> tuple[str, ...]:
    """What inference mode leaves untried, given tune's ``pipeline`` argument."""
    if not pipeline:
        return ()
    return (
        "input pipeline not tried in inference mode: diagnose(model, dataset, "
        'mode="inference") measures whether it is the limit',
    )
