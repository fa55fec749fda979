"""Which mode ``tune`` runs (``mode="training"`` or ``"inference"``), and which of its
arguments each mode takes: one rule for both modes, applied before either mode's arguments
are checked.
"""

from __future__ import annotations

from typing import Any

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
    ``InferenceArguments`` (``None`` in training mode).

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
