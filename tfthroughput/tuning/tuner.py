"""``tune``: try the throughput fixes on the user's own model, measure them honestly, keep the math.

(The module is not called ``tune``: a submodule ``tfthroughput.tuning.tune`` would shadow the
function of the same name in the package's face once imported.) Which mode runs and which
arguments each mode takes is one rule for both, applied before either mode's arguments are
checked (:func:`split_mode`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import keras

from tfthroughput._validation import leading_dimension
from tfthroughput.precision.precision_recommendation import PrecisionRecommendation
from tfthroughput.tuning._settings import inference_settings, training_settings
from tfthroughput.tuning.engine.confirmation import CONFIRM_ROUNDS
from tfthroughput.tuning.engine.search import Search
from tfthroughput.tuning.inference.data import InferenceArguments
from tfthroughput.tuning.inference.workload import InferenceWorkload
from tfthroughput.tuning.result import InferenceTuneResult, TuneResult
from tfthroughput.tuning.training.data import TuneArguments
from tfthroughput.tuning.training.distribution import describe, in_scope
from tfthroughput.tuning.training.workload import TrainingWorkload


def tune(
    build_model: Callable[[], keras.Model],
    data: Any,
    *,
    batch_size: int | None = None,
    steps_per_epoch: int | None = None,
    time_budget: float = 180.0,
    steps: int = 128,
    rounds: int = 3,
    confirm_rounds: int = CONFIRM_ROUNDS,
    callbacks: Sequence[keras.callbacks.Callback] | None = None,
    strategy: Any | None = None,
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

    Against the model as ``build_model`` compiles it, each on the best setup so far: the input
    pipeline, ``steps_per_execution`` with XLA as compiled and flipped, the recommended policy,
    with ``allow_batch_change`` batches 2x and 4x; each kept only if faster beyond the noise
    with the baseline's loss, the pick confirmed by whole ``fit`` epochs (the page "Tune").

    Args:
        build_model: Zero-argument function returning a new compiled ``keras.Model``.
        data: What ``fit`` takes: a ``tf.data.Dataset`` (batched, or not with ``batch_size``),
            a ``keras.utils.PyDataset``, or arrays ``(x, y)`` or ``(x, y, sample_weight)``
            (``x`` alone when unlabeled; ``x`` a list or dict of arrays for several inputs).
        batch_size: Examples per batch for arrays (``None``: 32) and unbatched datasets.
        steps_per_epoch: Your ``fit``'s: only ``steps_per_execution`` values dividing it are
            tried (Keras runs whole executions). Defaults to ``None``: the data's end.
        time_budget: Seconds the search may take. Defaults to ``180``.
        steps: Steps of a warm-up and of the shortest timed run. Defaults to ``128``.
        rounds: Alternated rounds per trial, at least 2. Defaults to ``3``.
        confirm_rounds: Rounds of the confirmation (whole epochs or ``predict`` calls, which
            give ``speedup``), at least 5. Defaults to ``5``.
        callbacks: Yours: run in the confirmation; batch hooks bound ``steps_per_execution``.
        strategy: A ``tf.distribute.Strategy`` every trial is built and trained under (the
            batch is then global; the result's ``distribution`` gives it per replica).
            Defaults to ``None``: the scope ``tune`` is called in, if any. TensorFlow only.
        precision: ``None`` (default): ``recommend_precision()`` here; a
            ``PrecisionRecommendation`` to use instead; ``False``: no policy tried.
        pipeline: Whether the input pipeline may be tried. Defaults to ``True``.
        xla: Whether to try XLA flipped (not under JAX). Defaults to ``True``.
        allow_batch_change: Try batch sizes 2x and 4x. Defaults to ``False``.
        max_steps_per_execution: Largest ``steps_per_execution`` tried. Defaults to ``1024``.
        loss_tolerance: Relative loss difference allowed. Defaults to ``0.05``.
        seed: Seed set before every model is built. Defaults to ``0``.
        log_dir: Where to write the table to TensorBoard's Text tab. Defaults to ``None``.
        clock: Seconds clock. Defaults to ``time.perf_counter``.
        mode: ``"training"``, or ``"inference"`` for ``predict`` (the page "Tune: inference").
        max_batch_latency_ms: Inference: largest p95 latency of one batch, ms. Default: none.
        output_tolerance: Inference: output difference allowed, relative. Default: ``0.02``.

    Returns:
        A frozen :class:`~tfthroughput.tuning.TuneResult` (``InferenceTuneResult``): print it.

    Raises:
        TypeError: If an argument has the wrong type (``build_model`` or what it returns).
        ValueError: If a value is out of range (``rounds=1``, a multi-host ``strategy``, ...).
        RuntimeError: If the model as given cannot be trained.

    Example:
        >>> result = tune(build, (x, y), batch_size=16, time_budget=60)  # doctest: +SKIP
    """
    given, inference = split_mode(locals())  # inference: None in training mode
    result = _tune_training(given) if inference is None else _tune_inference(inference)
    if log_dir is not None:
        result.write_to_tensorboard(log_dir)
    return result


def _tune_training(given: dict[str, Any]) -> TuneResult:
    """The search under the strategy, its result with the batches per replica."""
    arguments = TuneArguments(**given)  # checked on creation (tuning/training/data.py)
    build_model = in_scope(arguments.build_model, arguments.strategy)
    settings = training_settings(arguments)
    workload = TrainingWorkload(build_model, arguments.training, settings, arguments.clock)
    result = Search(workload, settings, arguments.clock).run()
    return describe(result, arguments.strategy, lambda: _examples_per_step(arguments.training))


def _tune_inference(given: dict[str, Any]) -> InferenceTuneResult:
    """The search over ``predict`` (``tuning/inference/workload.py``)."""
    arguments = InferenceArguments(**given)
    settings = inference_settings(arguments)
    inputs, clock = arguments.inputs, arguments.clock
    workload = InferenceWorkload(arguments.build_model, inputs, settings, clock)
    return Search(workload, settings, clock).run()


def _examples_per_step(training: Any) -> int:
    x, _ = training.first_batch()
    return leading_dimension(x)


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
