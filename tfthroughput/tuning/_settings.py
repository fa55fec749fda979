"""What ``tune``'s search tries, decided from its checked arguments and this machine.

Each knob left out, or bounded, leaves a note that the result prints: the callbacks' batch
hooks and the epoch length bound ``steps_per_execution``, ``recommend_precision`` picks the
dtype policy, the backend decides whether XLA is flipped and the pipeline tried.
"""

from __future__ import annotations

import keras

from tfthroughput.tuning._arguments import PY_DATASET, TuneArguments
from tfthroughput.tuning._environment import policy_to_try
from tfthroughput.tuning._epoch import epoch_steps
from tfthroughput.tuning._training_workload import TrainingSettings

_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")


def search_settings(arguments: TuneArguments) -> TrainingSettings:
    """The settings of the search, with a note for each knob bounded or not tried."""
    notes: list[str] = []
    training, limit = arguments.training, arguments.max_steps_per_execution
    epoch = epoch_steps(arguments.steps_per_epoch, notes)  # to divide, where given
    length = epoch or training.epoch_batches
    bound = min(limit, length or limit)
    bound = _callback_bound(arguments.callbacks, bound, notes)
    if length is not None and length < limit:
        notes.append(f"steps_per_execution bounded by the epoch length ({length} steps)")
    policy = policy_to_try(arguments.precision, notes)
    xla = arguments.xla
    if xla and keras.backend.backend() == "jax":
        xla = False
        notes.append(
            "XLA not flipped: JAX compiles every step with XLA, and jit_compile=False would "
            "run the steps eagerly"
        )
    # A PyDataset's input side is measured, not rebuilt: no TensorFlow needed for that.
    try_pipeline = arguments.pipeline and (
        keras.backend.backend() == "tensorflow" or training.kind == PY_DATASET
    )
    if arguments.pipeline and not try_pipeline:
        notes.append(
            "input pipeline not tried: the pipeline knob needs TensorFlow (Keras backend is "
            f"{keras.backend.backend()})"
        )
    return TrainingSettings(
        steps=arguments.steps,
        rounds=arguments.rounds,
        time_budget=arguments.time_budget,
        loss_tolerance=arguments.loss_tolerance,
        seed=arguments.seed,
        max_steps_per_execution=bound,
        policy=policy,
        try_pipeline=try_pipeline,
        try_xla=xla,
        allow_batch_change=arguments.allow_batch_change,
        notes=tuple(notes),
        epoch_steps=epoch,
        confirm_rounds=arguments.confirm_rounds,
        callbacks=tuple(arguments.callbacks or ()),
    )


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
