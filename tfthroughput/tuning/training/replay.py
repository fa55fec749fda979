"""The loss check's batches, taken once from the user's input and replayed to every trial,
and the tolerance measured where a knob changes the random stream itself.

Two passes of most real inputs differ (an unseeded ``shuffle``, a random augmentation in a
``map``), so two warm-ups that each read their own pass compare different batches, not
different arithmetic. The baseline's first warm-up batches are taken once; every trial that
reads the input as given warms up on exactly them, its model built from the same seed (the
same initial weights, the same Keras random draws). Where a knob changes the stream itself
(the rebuilt pipeline reads its own pass; a train step drawing from TensorFlow's stateful
random ops gets other draws once traced in a loop of several steps), the loss is held to a
tolerance measured from the input's own variation: the baseline's loss on fresh passes of its
input with its random stream reseeded, against its loss on the replayed batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras

from tfthroughput.tuning.engine.trial_model import TrialFailed
from tfthroughput.tuning.training.data import TrainingData
from tfthroughput.tuning.training.fit_runner import FitRunner
from tfthroughput.tuning.training.loss_check import (
    EXACT_TOLERANCE,
    MEASURED,
    OWN_PASS,
    REPLAYED,
    LossCheck,
)

# Most memory the replayed batches may hold; a larger input is read pass by pass instead.
REPLAY_MAX_BYTES = 512 * 2**20
# Fresh passes measured, and the margin over the largest difference they show: a candidate
# whose random stream differs draws one more sample of that difference. Simulated on normal
# losses, twice the largest of two differences rejects 11 % of candidates that keep the math;
# three times the largest of three, 1.9 %; the floor at ``loss_tolerance`` (below) removes the
# rest wherever the input varies less than that.
VARIATION_PASSES = 3
VARIATION_FACTOR = 3.0


def replay_feed(data: TrainingData, batch_size: int | None, steps: int) -> tuple[dict | None, str]:
    """``fit`` arguments yielding the same ``steps`` batches on every pass, taken once from
    the input, or ``None`` and why not (a ``PyDataset``, which its own code indexes, is read
    as given).

    Arrays are fed unshuffled, so every pass is already the same; a ``tf.data`` input is read
    once into an in-memory cache of its first ``steps`` batches."""
    return data.replay_feed(batch_size, steps, REPLAY_MAX_BYTES)


class Reseed(keras.callbacks.Callback):
    """Sets the random seeds at the start of ``fit``: the model keeps the weights built from
    the search's seed, the step's random ops (traced after this) draw another stream."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._seed = seed

    def on_train_begin(self, logs=None):
        keras.utils.set_random_seed(self._seed)


def relative_variation(reference: float, losses: Sequence[float]) -> float:
    """The largest relative difference of ``losses`` from ``reference`` (finite ones only).

    Example:
        >>> relative_variation(2.0, [2.1, 1.95, float("nan")])
        0.05
    """
    finite = [loss for loss in losses if math.isfinite(loss)]
    if not finite:
        return 0.0
    scale = max(abs(reference), 1e-12)
    return round(max(abs(loss - reference) for loss in finite) / scale, 12)


def replayed_for(workload: Any, setup: Any) -> dict | None:
    """The training ``workload``'s replayed batches where ``setup`` reads the input as given,
    at its batch; ``None`` where it reads its own (a rebuilt pipeline, another batch)."""
    own_input = setup.pipeline or setup.augment_on_device
    if own_input or setup.batch_size != workload.data.batch_size:
        return None
    return workload.replay


def loss_check(
    workload: Any, view: Any, setup: Any, runner: FitRunner, same_arithmetic: bool
) -> LossCheck:
    """A trial's warm-up loss against the baseline's: exactly where the arithmetic is the same
    (else within ``loss_tolerance``); where an exact check fails, within the tolerance measured
    from the input's own variation (:func:`measured_tolerance`), and never tighter than
    ``loss_tolerance``: a changed random stream is held as precision and device augmentation
    are, or looser where the input itself varies more."""
    basis = REPLAYED if replayed_for(workload, setup) is not None else OWN_PASS
    tolerance = EXACT_TOLERANCE if same_arithmetic else workload.settings.loss_tolerance
    losses = (view.base_runner.warmup_loss, runner.warmup_loss, same_arithmetic)
    check = LossCheck(*losses, tolerance, basis)
    if same_arithmetic and not check.passed and math.isfinite(runner.warmup_loss):
        # The rebuilt pipeline of arrays shuffles them as fit does: held to shuffled passes.
        data = getattr(workload, "data", None)
        shuffled = bool(setup.pipeline) and getattr(data, "shuffled_by_fit", False)
        measured = measured_tolerance(workload, view, shuffled=shuffled)
        if measured > EXACT_TOLERANCE:
            tolerance = max(measured, workload.settings.loss_tolerance)
            check = LossCheck(*losses, tolerance, MEASURED)
    return check


def measured_tolerance(workload: Any, view: Any, *, shuffled: bool = False) -> float:
    """The loss difference the input's own variation explains, measured once per search: the
    baseline rebuilt and warmed up on :data:`VARIATION_PASSES` fresh passes of the input, its
    random stream reseeded (with ``shuffled``, arrays shuffled as ``fit`` shuffles them), against
    its loss on the replayed batches, times :data:`VARIATION_FACTOR`."""
    attribute = "shuffled_tolerance" if shuffled else "measured_tolerance"
    if getattr(workload, attribute, None) is None:
        losses = []
        for offset in range(1, VARIATION_PASSES + 1):
            feed = workload.data.feed(workload.data.batch_size, workload.steps)
            if shuffled:
                feed["shuffle"] = True
            reseed = Reseed(workload.settings.seed + offset)  # only warmed up, never timed
            runner = workload.runner(
                None, workload.build_model, feed, steps=workload.steps, callbacks=(reseed,)
            )
            try:
                runner.start()
                losses.append(runner.warmup_loss)
            except TrialFailed:
                pass
            finally:
                runner.close()
        variation = relative_variation(view.base_runner.warmup_loss, losses)
        setattr(workload, attribute, VARIATION_FACTOR * variation)
        view.note(
            f"loss check: the input's own variation measured over {len(losses)} fresh passes, "
            f"random stream reseeded{', arrays shuffled' if shuffled else ''}: "
            f"{variation:.1e} relative"
        )
    return getattr(workload, attribute)
