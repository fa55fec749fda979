"""What ``tune``'s search tries in either mode, decided from its checked arguments and this
machine.

Each knob left out, or bounded, leaves a note that the result prints: the callbacks' batch
hooks and the epoch length bound ``steps_per_execution``, ``recommend_precision`` picks the
dtype policy, the backend decides whether XLA is flipped and the pipeline tried.
"""

from __future__ import annotations

from typing import Any

import keras

from tfthroughput.tuning.engine.environment import policy_to_try
from tfthroughput.tuning.inference.workload import InferenceSettings
from tfthroughput.tuning.knobs.steps_per_execution import epoch_steps
from tfthroughput.tuning.training.data import TuneArguments
from tfthroughput.tuning.training.workload import TrainingSettings

_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")


def training_settings(arguments: TuneArguments) -> TrainingSettings:
    """The training search's settings, with a note for each knob bounded or not tried."""
    notes: list[str] = []
    training, limit = arguments.training, arguments.max_steps_per_execution
    epoch = epoch_steps(arguments.steps_per_epoch, notes)  # to divide, where given
    length = epoch or training.epoch_batches
    bound = min(limit, length or limit)
    bound = _callback_bound(arguments.callbacks, bound, notes)
    if length is not None and length < limit:
        notes.append(f"steps_per_execution bounded by the epoch length ({length} steps)")
    shared = _shared(
        arguments,
        notes,
        jax_xla="XLA not flipped: JAX compiles every step with XLA, and jit_compile=False would "
        "run the steps eagerly",
    )
    # A PyDataset's input side is measured, not rebuilt: no TensorFlow needed for that.
    try_pipeline = arguments.pipeline and (
        keras.backend.backend() == "tensorflow" or not training.rebuildable
    )
    if arguments.pipeline and not try_pipeline:
        notes.append(
            "input pipeline not tried: the pipeline knob needs TensorFlow (Keras backend is "
            f"{keras.backend.backend()})"
        )
    return TrainingSettings(
        **shared,
        loss_tolerance=arguments.loss_tolerance,
        max_steps_per_execution=bound,
        try_pipeline=try_pipeline,
        allow_batch_change=arguments.allow_batch_change,
        notes=tuple(notes),
        epoch_steps=epoch,
        callbacks=tuple(arguments.callbacks or ()),
    )


def inference_settings(arguments: Any) -> InferenceSettings:
    """The inference search's settings (``arguments``: ``InferenceArguments``), with a note
    for each knob it leaves out."""
    notes = []
    if arguments.pipeline:
        notes.append(
            "input pipeline not tried in inference mode: diagnose(model, dataset, "
            'mode="inference") measures whether it is the limit'
        )
    shared = _shared(
        arguments, notes, jax_xla="XLA not flipped: JAX compiles predict with XLA already"
    )
    return InferenceSettings(
        **shared,
        output_tolerance=arguments.output_tolerance,
        max_steps_per_execution=arguments.max_steps_per_execution,
        max_batch_latency_ms=arguments.max_batch_latency_ms,
        notes=tuple(notes),
    )


def _shared(arguments: Any, notes: list[str], *, jax_xla: str) -> dict[str, Any]:
    """The settings both searches take alike: the counts and budget as given, the policy
    ``recommend_precision`` picks, and XLA flipped except under JAX (``jax_xla``: the note
    why not, in the mode's words)."""
    policy = policy_to_try(arguments.precision, notes)
    xla = arguments.xla and keras.backend.backend() != "jax"
    if arguments.xla and not xla:
        notes.append(jax_xla)
    return {
        "steps": arguments.steps,
        "rounds": arguments.rounds,
        "time_budget": arguments.time_budget,
        "seed": arguments.seed,
        "policy": policy,
        "try_xla": xla,
        "confirm_rounds": arguments.confirm_rounds,
    }


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
