"""Time ``model.fit`` steps without slowing them down (shared by diagnose and the finder)."""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf


class _EpochTimer(keras.callbacks.Callback):
    """Times each epoch of a ``fit``.

    Only epoch hooks are overridden, so Keras keeps dispatching steps asynchronously; an epoch
    ends with Keras reading the metrics back (a device sync), so each epoch's time covers its
    steps' actual execution.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        on_measure_begin: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self._clock = clock
        self._on_measure_begin = on_measure_begin
        self._start = 0.0
        self.seconds: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1 and self._on_measure_begin is not None:
            self._on_measure_begin()
        self._start = self._clock()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(self._clock() - self._start)


def _timed_fit(
    model: keras.Model,
    dataset: tf.data.Dataset,
    *,
    steps: int,
    repeats: int,
    clock: Callable[[], float],
    on_measure_begin: Callable[[], None] | None = None,
) -> list[float]:
    """Run ``fit`` for one warm-up epoch plus ``repeats`` timed epochs of ``steps`` steps.

    The warm-up epoch absorbs tracing, XLA compilation, iterator creation and pipeline fill.
    ``dataset`` must yield at least ``steps * (repeats + 1)`` batches (repeat it).

    Returns:
        Seconds of each timed epoch (warm-up excluded).
    """
    timer = _EpochTimer(clock, on_measure_begin)
    model.fit(
        dataset,
        epochs=repeats + 1,
        steps_per_epoch=steps,
        verbose=0,
        shuffle=False,
        callbacks=[timer],
    )
    if len(timer.seconds) != repeats + 1:
        raise RuntimeError(
            f"`fit` stopped after {len(timer.seconds)} of {repeats + 1} epochs (a callback or "
            "the model set `stop_training`, or the dataset ran out), so no timing was taken."
        )
    return timer.seconds[1:]
