"""``tune``: try the throughput fixes on the user's own model, measure them honestly, keep the math.

(The module is not called ``tune``: a submodule ``tfthroughput.tuning.tune`` would shadow the
function of the same name in the package's face once imported.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import keras

from tfthroughput._validation import check_positive_int
from tfthroughput.precision.precision_recommendation import PrecisionRecommendation
from tfthroughput.tuning._arguments import (
    check_builder,
    check_fraction,
    check_positive_seconds,
    training_data,
)
from tfthroughput.tuning._environment import clear_session, gpu_sampler, policy_to_try
from tfthroughput.tuning._measure import GPUWindows
from tfthroughput.tuning._search import Search, SearchSettings
from tfthroughput.tuning.inference_result import InferenceTuneResult
from tfthroughput.tuning.inference_tuner import check_mode, inference_notes, tune_inference
from tfthroughput.tuning.result import TuneResult

# tune's arguments that inference mode takes as they are.
_SHARED_WITH_INFERENCE = (
    "batch_size",
    "time_budget",
    "steps",
    "rounds",
    "precision",
    "xla",
    "max_steps_per_execution",
    "seed",
    "log_dir",
    "clock",
)
_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")


def tune(
    build_model: Callable[[], keras.Model],
    data: Any,
    *,
    batch_size: int | None = None,
    time_budget: float = 180.0,
    steps: int = 128,
    rounds: int = 3,
    callbacks: Sequence[keras.callbacks.Callback] | None = None,
    precision: PrecisionRecommendation | bool | None = None,
    pipeline: bool = True,
    xla: bool = True,
    allow_batch_change: bool = False,
    max_steps_per_execution: int = 1024,
    loss_tolerance: float = 0.05,
    seed: int = 0,
    log_dir: str | None = None,
    clock: Callable[[], float] = time.perf_counter,
    mode: str = "training",
    max_batch_latency_ms: float | None = None,
    output_tolerance: float | None = None,
) -> TuneResult | InferenceTuneResult:
    """Measure the throughput knobs on fresh copies of a model and choose the fastest setup.

    The baseline is the model exactly as ``build_model`` compiles it. Then, each on top of the
    best setup so far, on fresh models from the same seed: the input pipeline (TensorFlow
    only, and only where the input is the limit: diagnose's input-bound fraction from a
    compute-only probe, or a ``lint_pipeline`` finding), ``steps_per_execution`` (a doubling
    search, once with XLA as compiled and once with XLA flipped, since XLA can help at one
    value and hurt at another), the dtype policy :func:`tfthroughput.recommend_precision`
    recommends (where it differs from the one in force), and, with ``allow_batch_change``,
    batch sizes 2x and 4x.

    Measurement: every trial warms up once (tracing and XLA compilation are reported as
    warm-up seconds, not timed), then runs ``rounds`` timed runs of ``steps`` steps,
    alternated with runs of the baseline so drift of the machine cancels. A trial is
    ``"faster"`` only when even its lowest per-round ratio to the baseline exceeds
    ``1 + noise``, the baseline's own relative spread in the same rounds (at least 3 %).
    Trials that fail (out of memory, XLA cannot compile, a non-finite loss) are reported with
    the reason and never chosen.

    The math: every trial starts from the same initial weights and sees the same examples in
    the same order; the mean loss of its warm-up is compared with the baseline's.
    ``steps_per_execution`` and the rebuilt pipeline must match it within ``1e-5``
    (relative); XLA, the policy and the batch size change the arithmetic and may differ by
    ``loss_tolerance``; beyond it the trial is rejected.

    Args:
        build_model: Zero-argument function returning a new compiled ``keras.Model`` (called
            once per trial, under the trial's dtype policy).
        data: What ``fit`` takes: a ``tf.data.Dataset`` of batches, an unbatched one with
            ``batch_size``, or a tuple ``(x, y)`` of NumPy arrays.
        batch_size: Examples per batch for arrays (default ``None``: 32, as ``fit``) and for
            an unbatched dataset; ``None`` for a batched dataset.
        time_budget: Seconds the search may take. Defaults to ``180``. A trial is not
            started when the time left is less than 1.25 times the cost of the most expensive
            of the last three trials.
        steps: Steps of each trial's warm-up (rounded up to a power-of-two multiple of the
            model's own ``steps_per_execution``), the largest ``steps_per_execution`` tried,
            and the shortest timed run: timed runs are doubled (up to 64x) until the
            baseline's lasts 0.1 s, so that scheduling noise does not dominate them.
            Defaults to ``128``.
        rounds: Alternated rounds per trial, at least 2. Defaults to ``3``.
        callbacks: The callbacks you train with: one that needs every batch's hook (it
            overrides a train batch hook and has no integer ``update_freq``) keeps
            ``steps_per_execution`` at 1; an integer ``update_freq`` bounds it. Defaults to
            ``None``.
        precision: ``None`` (default): what ``recommend_precision`` says for this machine's
            devices; a :class:`~tfthroughput.precision.PrecisionRecommendation` to use
            instead; ``False``: do not try a policy.
        pipeline: Whether the input pipeline may be tried (TensorFlow backend). Defaults to
            ``True``.
        xla: Whether to try XLA flipped (``jit_compile`` the other way from the model's).
            Defaults to ``True``. Not under JAX, which always compiles with XLA
            (``jit_compile=False`` runs eagerly there).
        allow_batch_change: Try batch sizes 2x and 4x. They change the learning dynamics
            (fewer optimizer steps); the result says so. Defaults to ``False``.
        max_steps_per_execution: Largest ``steps_per_execution`` tried. Defaults to ``1024``.
        loss_tolerance: Relative loss difference allowed for knobs that change the
            arithmetic. Defaults to ``0.05``.
        seed: Seed set before every model is built. Defaults to ``0``.
        log_dir: Where to write the table to TensorBoard's Text tab (the run it concerns).
            Defaults to ``None``: not written.
        clock: Seconds clock. Defaults to ``time.perf_counter``.
        mode: ``"training"`` (the above), or ``"inference"``: tune ``model.predict`` instead,
            on ``data`` as ``predict`` takes it (inputs only): the batch size (doubling),
            ``jit_compile``, ``steps_per_execution`` and the policy, judged on examples/s,
            per-batch latency and the outputs; see ``docs/tuning.md`` and
            :func:`tfthroughput.tuning.inference_tuner.tune_inference`. ``callbacks``,
            ``allow_batch_change`` and ``loss_tolerance`` are training's only.
        max_batch_latency_ms: Inference only: the largest p95 latency of one batch, in
            milliseconds. Defaults to ``None``: no limit.
        output_tolerance: Inference only: the largest output difference, relative to the
            largest output, for knobs that change the arithmetic. Defaults to ``None``:
            ``0.02``.

    Returns:
        A frozen :class:`~tfthroughput.tuning.TuneResult`: ``print`` it for the table;
        ``compile_kwargs``, ``apply(model)``, ``pipeline_kwargs`` and ``snippet`` apply it.
        In inference mode an :class:`~tfthroughput.tuning.InferenceTuneResult`, with
        ``predict_kwargs`` too.

    Raises:
        TypeError: If ``build_model`` is a model rather than a function, returns no compiled
            model, or ``data``/an argument has the wrong type.
        ValueError: If a number is out of range (``time_budget=0``, ``rounds=1``, ...).
        RuntimeError: If the model as given cannot be trained.

    Example:
        >>> def build():
        ...     model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(1)])
        ...     model.compile("sgd", "mse")
        ...     return model
        >>> result = tune(build, (x, y), batch_size=16, time_budget=60)  # doctest: +SKIP
        >>> print(result)  # doctest: +SKIP
        >>> model.compile("sgd", "mse", **result.compile_kwargs)  # doctest: +SKIP
    """
    given = {**locals()}
    if check_mode(mode, given):
        return tune_inference(
            build_model,
            data,
            **{k: given[k] for k in _SHARED_WITH_INFERENCE},
            max_batch_latency_ms=max_batch_latency_ms,
            output_tolerance=output_tolerance,
            notes=inference_notes(pipeline),
        )
    check_builder(build_model)
    time_budget = check_positive_seconds("time_budget", time_budget)
    check_positive_int("steps", steps)
    check_positive_int("rounds", rounds)
    if rounds < 2:
        raise ValueError(
            f"`rounds` must be at least 2 (the noise is the spread between rounds). "
            f"Received: rounds={rounds}"
        )
    check_positive_int("max_steps_per_execution", max_steps_per_execution)
    loss_tolerance = check_fraction("loss_tolerance", loss_tolerance)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TypeError(f"`seed` must be a non-negative int. Received: seed={seed!r}")
    for name, value in (
        ("pipeline", pipeline),
        ("xla", xla),
        ("allow_batch_change", allow_batch_change),
    ):
        if not isinstance(value, bool):
            raise TypeError(f"`{name}` must be a bool. Received: {name}={value!r}")
    if not callable(clock):
        raise TypeError(f"`clock` must be callable. Received: clock={clock!r}")
    training = training_data(data, batch_size)
    notes: list[str] = []
    bound = min(max_steps_per_execution, training.epoch_batches or max_steps_per_execution)
    bound = _callback_bound(callbacks, bound, notes)
    if training.epoch_batches is not None and training.epoch_batches < max_steps_per_execution:
        notes.append(
            f"steps_per_execution bounded by the epoch length ({training.epoch_batches} batches)"
        )
    policy = policy_to_try(precision, notes)
    if xla and keras.backend.backend() == "jax":
        xla = False
        notes.append(
            "XLA not flipped: JAX compiles every step with XLA, and jit_compile=False would "
            "run the steps eagerly"
        )
    try_pipeline = pipeline and keras.backend.backend() == "tensorflow"
    if pipeline and not try_pipeline:
        notes.append(
            "input pipeline not tried: the pipeline knob needs TensorFlow (Keras backend is "
            f"{keras.backend.backend()})"
        )
    settings = SearchSettings(
        steps=steps,
        rounds=rounds,
        time_budget=time_budget,
        loss_tolerance=loss_tolerance,
        seed=seed,
        max_steps_per_execution=bound,
        policy=policy,
        try_pipeline=try_pipeline,
        try_xla=xla,
        allow_batch_change=allow_batch_change,
        notes=tuple(notes),
    )
    policy_in_force = keras.config.dtype_policy()
    clear_session(policy_in_force)
    sampler = gpu_sampler()
    try:
        result = Search(build_model, training, settings, clock, GPUWindows(sampler)).run()
    finally:
        if sampler is not None:
            sampler.stop()
        clear_session(policy_in_force)
    if log_dir is not None:
        result.write_to_tensorboard(log_dir)
    return result


def _callback_bound(callbacks: object, bound: int, notes: list[str]) -> int:
    if callbacks is None:
        return bound
    if not isinstance(callbacks, (list, tuple)) or not all(
        isinstance(c, keras.callbacks.Callback) for c in callbacks
    ):
        raise TypeError(
            f"`callbacks` must be a list of keras.callbacks.Callback. Received: {callbacks!r}"
        )
    for callback in callbacks:
        overrides = any(
            getattr(type(callback), hook) is not getattr(keras.callbacks.Callback, hook)
            for hook in _BATCH_HOOKS
        )
        if not overrides:
            continue
        frequency = getattr(callback, "update_freq", None)
        if frequency == "epoch":
            continue
        limit = frequency if isinstance(frequency, int) and frequency > 0 else 1
        if limit < bound:
            bound = limit
            notes.append(
                f"steps_per_execution bounded by {type(callback).__name__} to {limit}: it needs "
                "its batch hook every " + ("batch" if limit == 1 else f"{limit} batches")
            )
    return bound
