"""Find the largest batch size that fits, and the fastest one, by measuring real ``fit`` steps."""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from tfthroughput.diagnosis._batch_trial import (
    _check_search_arguments,
    _DoesNotFit,
    _Measured,
    _trial_runner,
    training_arrays,
)
from tfthroughput.diagnosis.trial_memory import collections_of_new_objects_only, to_mib

Trial = Callable[[int], "float | None"]


@dataclass(frozen=True)
class BatchSizeTrial:
    """One tried batch size.

    Attributes:
        batch_size: The batch size tried.
        fits: Whether training at this batch size ran within memory.
        examples_per_second: Measured training throughput, or ``None`` when it did not fit.
        reason: Why it did not fit (the error's first line, or the memory ceiling that was
            exceeded); ``""`` when it fit.
        memory_mib: Memory the trial added to the process at its peak (peak RSS minus the
            RSS it started from), in MiB like ``memory_limit_mib``; ``None`` when not measured
            (no ``memory_limit_mib``, or a custom ``trial``).
    """

    batch_size: int
    fits: bool
    examples_per_second: float | None
    reason: str = ""
    memory_mib: float | None = None


@dataclass(frozen=True)
class BatchSizeSearch:
    """What :func:`find_batch_size` found.

    Attributes:
        largest_fitting: The largest batch size that fit.
        fastest: The fitting batch size with the highest examples/s.
        trials: Every trial, in the order run.
        reached_max: ``True`` when ``largest_fitting`` is ``max_batch_size``: the real limit
            may be higher.
        complete: ``False`` when ``max_trials`` ran out before the search converged;
            ``largest_fitting`` is then a lower bound.
    """

    largest_fitting: int
    fastest: int
    trials: tuple[BatchSizeTrial, ...]
    reached_max: bool
    complete: bool

    @property
    def curve(self) -> tuple[tuple[int, float], ...]:
        """``(batch_size, examples_per_second)`` of every fitting trial, by batch size."""
        return tuple(
            sorted(
                (t.batch_size, t.examples_per_second)
                for t in self.trials
                if t.fits and t.examples_per_second is not None
            )
        )

    @property
    def fastest_examples_per_second(self) -> float:
        """Examples per second at ``fastest``."""
        return dict(self.curve)[self.fastest]

    def __str__(self) -> str:
        limit = "" if self.complete else " (search stopped at max_trials: a lower bound)"
        if self.reached_max:
            limit += " (= max_batch_size: the real limit may be higher)"
        lines = [
            f"largest batch size that fits: {self.largest_fitting}{limit}",
            f"fastest batch size: {self.fastest} "
            f"({self.fastest_examples_per_second:,.1f} examples/s)",
            "",
            f"{'batch size':>10}  {'examples/s':>12}",
        ]
        measured = any(t.memory_mib is not None for t in self.trials)
        if measured:
            lines[-1] += f"  {'added MiB':>9}"
        for trial in sorted(self.trials, key=lambda t: t.batch_size):
            memory = ""
            if measured:
                memory = "" if trial.memory_mib is None else f"{trial.memory_mib:,.1f}"
                memory = f"  {memory:>9}"
            speed = (
                f"{trial.examples_per_second:>12,.1f}{memory}"
                if trial.fits
                else f"{'does not fit':>12}{memory}  {trial.reason}"
            )
            lines.append(f"{trial.batch_size:>10}  {speed}".rstrip())
        return "\n".join(lines)


def find_batch_size(
    build_model: Callable[[], keras.Model] | None = None,
    data: Callable[[int], tf.data.Dataset] | tf.data.Dataset | None = None,
    y: Any = None,
    *,
    min_batch_size: int = 1,
    max_batch_size: int = 4096,
    steps: int = 5,
    max_trials: int = 32,
    memory_limit_mib: int | None = None,
    trial: Trial | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> BatchSizeSearch:
    """Find the largest batch size that fits in memory, and the one with the best examples/s.

    The search doubles the batch size from ``min_batch_size`` until a trial does not fit (or
    ``max_batch_size`` is reached), then binary-searches between the last size that fit and the
    first that did not. For a largest fitting size ``F``, with
    ``d = floor(log2(F / min_batch_size)) + 1``, that is at most
    ``2 * d + ceil(log2(min_batch_size))`` trials
    (14 for ``min_batch_size=1`` and ``F=100``, 11 for ``min_batch_size=8`` and ``F=100``),
    26 at most with the defaults. Every trial that fits also measures throughput, so the result
    carries the examples/s curve and its best point. A default trial clears the Keras session,
    builds a fresh model and runs ``fit`` for one warm-up and one timed epoch of ``steps``
    steps; it does not fit on ``tf.errors.ResourceExhaustedError``, ``MemoryError`` or, with
    ``memory_limit_mib``, a process RSS above that ceiling, counting each trial's own peak
    only. The docs' page "Know" tells how memory is measured.

    Args:
        build_model: Zero-argument callable returning a new compiled Keras model (under a
            strategy's scope, batch sizes are global). Required unless ``trial`` is given.
        data: A callable ``batch_size -> tf.data.Dataset`` of batches (or ``->
            keras.utils.PyDataset``, read by ``fit`` with its workers), or an unbatched
            ``tf.data.Dataset`` of examples (repeated, batched with ``drop_remainder=True``,
            prefetched), or NumPy arrays as ``fit`` takes them: ``x`` (with ``y``), or ``(x,
            y)`` in one tuple. Required unless ``trial`` is given.
        y: The targets when ``data`` is arrays ``x``, as in ``fit(x, y)`` and
            ``diagnose(model, x, y)``. Defaults to ``None``.
        min_batch_size: First and smallest batch size tried. Defaults to ``1``.
        max_batch_size: Largest batch size tried. Defaults to ``4096``.
        steps: Timed training steps per trial (after as many warm-up steps). Defaults to ``5``.
        max_trials: Most trials run; the search stops there and says so. Defaults to ``32``.
        memory_limit_mib: Ceiling on the process RSS a trial may reach, in MiB (for CPU
            training, where running out of memory swaps or kills). Defaults to ``None``.
        trial: Replaces the default trial: ``batch_size -> examples/s``, or ``None`` when it
            does not fit. Defaults to ``None``.
        clock: Seconds-returning clock for the default trial. Defaults to
            ``time.perf_counter``.

    Returns:
        A frozen :class:`BatchSizeSearch`.

    Raises:
        TypeError: If an argument has the wrong type, or ``data`` returns no Dataset.
        ValueError: If a number is out of range, ``min_batch_size > max_batch_size`` (or the
            examples in arrays), arrays differ in length, or ``build_model``/``data`` are
            missing without a ``trial``.
        RuntimeError: If even ``min_batch_size`` does not fit.

    Example:
        >>> result = find_batch_size(build, examples, max_batch_size=1024)  # doctest: +SKIP
        >>> result.largest_fitting, result.fastest  # doctest: +SKIP
    """
    _check_search_arguments(
        min_batch_size, max_batch_size, steps, max_trials, memory_limit_mib, clock
    )
    arrays = None if trial is not None else training_arrays(data, y)
    if arrays is not None:  # a batch holds at most every example
        max_batch_size = _within_examples(min_batch_size, max_batch_size, arrays.examples)
    run_trial = _trial_runner(
        build_model, data if arrays is None else arrays, trial, steps, memory_limit_mib, clock
    )
    try:
        with collections_of_new_objects_only():  # each trial collects: scan only the search's
            return _search(run_trial, min_batch_size, max_batch_size, max_trials)
    finally:
        if trial is None:  # nothing of the default trials stays allocated
            keras.backend.clear_session()


def _within_examples(min_batch_size: int, max_batch_size: int, examples: int) -> int:
    """The largest batch size arrays of ``examples`` can fill (``ValueError`` if even
    ``min_batch_size`` is more)."""
    if min_batch_size > examples:
        raise ValueError(
            f"`min_batch_size` must not exceed the {examples} examples in `data`. "
            f"Received: min_batch_size={min_batch_size}"
        )
    return min(max_batch_size, examples)


def _try(trial: Trial, batch_size: int) -> BatchSizeTrial:
    try:
        speed = trial(batch_size)
    except (tf.errors.ResourceExhaustedError, MemoryError, _DoesNotFit) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        memory = to_mib(getattr(error, "memory_bytes", None))
        return BatchSizeTrial(batch_size, False, None, reason[:200], memory)
    if isinstance(speed, _Measured):
        return BatchSizeTrial(
            batch_size, True, speed.examples_per_second, memory_mib=to_mib(speed.memory_bytes)
        )
    if speed is None:
        return BatchSizeTrial(batch_size, False, None, "trial returned None")
    if isinstance(speed, bool) or not isinstance(speed, numbers.Real) or speed < 0:
        raise TypeError(
            "A trial must return a non-negative number of examples/s or None. "
            f"Received: {speed!r} for batch_size={batch_size}"
        )
    return BatchSizeTrial(batch_size, True, float(speed))


def _search(trial: Trial, low: int, high: int, max_trials: int) -> BatchSizeSearch:
    trials: list[BatchSizeTrial] = []

    def run(batch_size: int) -> bool:
        result = _try(trial, batch_size)
        trials.append(result)
        return result.fits

    if not run(low):
        raise RuntimeError(
            f"Even the smallest batch size does not fit: min_batch_size={low} "
            f"({trials[0].reason}). Use a smaller model or input, lower `min_batch_size`, "
            "or raise `memory_limit_mib`."
        )
    fits, fails = low, None
    # Doubling: find a size that does not fit (or reach the cap).
    while fails is None and fits < high and len(trials) < max_trials:
        candidate = min(fits * 2, high)
        if run(candidate):
            fits = candidate
        else:
            fails = candidate
    # Binary search between the last size that fit and the first that did not.
    while fails is not None and fails - fits > 1 and len(trials) < max_trials:
        candidate = (fits + fails) // 2
        if run(candidate):
            fits = candidate
        else:
            fails = candidate
    complete = (fails is not None and fails - fits <= 1) or fits == high
    fitting = [t for t in trials if t.fits]
    fastest = max(fitting, key=lambda t: (t.examples_per_second, -t.batch_size)).batch_size
    return BatchSizeSearch(
        largest_fitting=fits,
        fastest=fastest,
        trials=tuple(trials),
        reached_max=fits == high,
        complete=complete,
    )
