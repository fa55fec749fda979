"""The loss check's batches, taken once from the user's input and replayed to every trial,
and the tolerance measured where a knob changes the random stream itself.

Two passes of most real inputs differ (an unseeded ``shuffle``, a random augmentation in a
``map``), so two warm-ups that each read their own pass compare different batches, not
different arithmetic. The baseline's first warm-up batches are taken once; every trial that
reads the input as given warms up on exactly them, its model built from the same seed (the
same initial weights, the same Keras random draws). Where a knob changes the stream itself
(the rebuilt pipeline reads its own pass; a train step drawing from TensorFlow's stateful
random ops gets other draws once traced in a loop of several steps), the loss is held to a
tolerance measured from the input's own variation: a bound, from the baseline's loss on its
replayed batches and on fresh passes of its input with its random stream reseeded, that holds
one more loss over a pass but for a small, known share of them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Generator, Sequence
from typing import Any, NamedTuple

import keras
import numpy as np

from tfthroughput._validation import leading_dimension
from tfthroughput.tuning.training.data import TrainingData
from tfthroughput.tuning.training.fit_runner import FitRunner
from tfthroughput.tuning.training.loss_check import (
    EXACT_TOLERANCE,
    MEASURED,
    OWN_PASS,
    REPLAYED,
    LossCheck,
)

# What fit takes as arrays, one entry per example.
ARRAY_KEYS = ("x", "y", "sample_weight")
# Most memory the replayed batches may hold; a larger input is read pass by pass instead.
REPLAY_MAX_BYTES = 512 * 2**20
# The candidate's loss, where its random stream differs, is one more draw of the loss over a
# pass. The baseline's replayed loss and its fresh passes are k draws of it (the fresh passes
# alone where they are shuffled and the replayed batches are not); the bound is their mean
# +- t * s * sqrt(1 + 1/k): s their standard deviation, t Student's quantile at
# 1 - FALSE_REJECTION / 2 with k - 1 degrees of freedom. A candidate that keeps the math falls
# outside it with probability FALSE_REJECTION where the losses are normally spread, whatever
# their spread (a prediction interval); the mean, not one draw, is the reference. The floor at
# ``loss_tolerance`` (below) removes more wherever the input varies less than that.
VARIATION_PASSES = 5
FALSE_REJECTION = 0.005
# Student's t at 1 - FALSE_REJECTION / 2, by degrees of freedom (k - 1; fewer where a pass failed).
T_QUANTILES = {1: 127.321, 2: 14.089, 3: 7.453, 4: 5.598, 5: 4.773}


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


class Variation(NamedTuple):
    """The loss over a pass of the input: the ``centre`` of the draws measured, and the relative
    half-width of the bound around it that holds one more draw (``tolerance``; 0 where the
    draws do not vary, or fewer than two are finite)."""

    centre: float
    tolerance: float


def prediction_bound(losses: Sequence[float]) -> Variation:
    """The mean of ``losses`` (finite ones only) and the relative half-width of the bound
    that holds one more draw of them but for :data:`FALSE_REJECTION` of draws (``losses``
    normally spread).

    Example:
        >>> prediction_bound([1.0, 1.1, 0.9, 1.0, float("nan")])
        Variation(centre=1.0, tolerance=0.680362703514)
    """
    finite = [loss for loss in losses if math.isfinite(loss)]
    if len(finite) < 2:
        return Variation(finite[0] if finite else math.nan, 0.0)
    draws = len(finite)
    centre = statistics.fmean(finite)
    half = T_QUANTILES[min(draws - 1, max(T_QUANTILES))] * statistics.stdev(finite)
    half *= math.sqrt(1 + 1 / draws)
    return Variation(centre, round(half / max(abs(centre), 1e-12), 12))


def shuffled_feed(feed: dict, examples: int, seed: int) -> dict:
    """``feed``'s arrays (``examples`` of them, repeated) in an order of their own, drawn from
    ``seed``: each repetition shuffled over all the examples, as the rebuilt pipeline of arrays
    shuffles them every pass (``fit``'s own shuffle would draw the same order on every pass,
    from the search's seed)."""
    rng = np.random.default_rng(seed)
    length = leading_dimension(feed["x"])
    order = np.concatenate(
        [start + rng.permutation(examples) for start in range(0, length, examples)]
    )
    take = lambda array: np.asarray(array)[order]  # noqa: E731
    arrays = {key: keras.tree.map_structure(take, feed[key]) for key in ARRAY_KEYS if key in feed}
    return {**feed, **arrays, "shuffle": False}


def replayed_for(workload: Any, setup: Any) -> dict | None:
    """The training ``workload``'s replayed batches where ``setup`` reads the input as given,
    at its batch; ``None`` where it reads its own (a rebuilt pipeline, another batch)."""
    own_input = setup.pipeline or setup.augment_on_device
    if own_input or setup.batch_size != workload.data.batch_size:
        return None
    return workload.replay


def loss_check(
    workload: Any, view: Any, setup: Any, runner: FitRunner, same_arithmetic: bool
) -> Generator[FitRunner, bool, LossCheck]:
    """A trial's warm-up loss against the baseline's: exactly where the arithmetic is the same
    (else within ``loss_tolerance``); where an exact check fails, within the bound measured
    from the input's own variation (:func:`measured_tolerance`: against the mean of the
    baseline's losses over passes of the input), and never tighter than ``loss_tolerance``: a
    changed random stream is held as precision and device augmentation are, or looser where
    the input itself varies more. A generator, as a judge may be (``engine.contract``): it
    yields the runners of those passes for the search to start."""
    basis = REPLAYED if replayed_for(workload, setup) is not None else OWN_PASS
    tolerance = EXACT_TOLERANCE if same_arithmetic else workload.settings.loss_tolerance
    losses = (view.base_runner.warmup_loss, runner.warmup_loss, same_arithmetic)
    check = LossCheck(*losses, tolerance, basis)
    if same_arithmetic and not check.passed and math.isfinite(runner.warmup_loss):
        # The rebuilt pipeline of arrays shuffles them as fit does: held to shuffled passes.
        data = getattr(workload, "data", None)
        shuffled = bool(setup.pipeline) and getattr(data, "shuffled_by_fit", False)
        centre, measured = yield from measured_tolerance(workload, view, shuffled=shuffled)
        if measured > EXACT_TOLERANCE:
            tolerance = max(measured, workload.settings.loss_tolerance)
            check = LossCheck(centre, runner.warmup_loss, True, tolerance, MEASURED)
    return check


def measured_tolerance(
    workload: Any, view: Any, *, shuffled: bool = False
) -> Generator[FitRunner, bool, Variation]:
    """The loss over a pass of the input and the difference its own variation explains,
    measured once per search (:func:`prediction_bound`): the baseline rebuilt and warmed up
    on :data:`VARIATION_PASSES` fresh passes of the input, its random stream reseeded, with
    its loss on the replayed batches (with ``shuffled``, arrays shuffled as ``fit`` shuffles
    them, and without the replayed batches, which are not). Yields each pass's runner to be
    started, and is sent whether it started."""
    attribute = "shuffled_tolerance" if shuffled else "measured_tolerance"
    if getattr(workload, attribute, None) is None:
        losses = []
        for offset in range(1, VARIATION_PASSES + 1):
            feed = workload.data.feed(workload.data.batch_size, workload.steps)
            if shuffled:
                feed = shuffled_feed(feed, workload.data.examples, workload.settings.seed + offset)
            reseed = Reseed(workload.settings.seed + offset)  # only warmed up, never timed
            runner = workload.runner(
                None, workload.build_model, feed, steps=workload.steps, callbacks=(reseed,)
            )
            try:
                if (yield runner):
                    losses.append(runner.warmup_loss)
            finally:
                runner.close()
        replayed = [] if shuffled else [view.base_runner.warmup_loss]
        variation = prediction_bound(replayed + losses)
        setattr(workload, attribute, variation)
        view.note(
            f"loss check: the input's own variation measured over {len(losses)} fresh passes, "
            f"random stream reseeded{', arrays shuffled' if shuffled else ''}: a bound of "
            f"{variation.tolerance:.1e} relative around their mean loss"
        )
    return getattr(workload, attribute)
