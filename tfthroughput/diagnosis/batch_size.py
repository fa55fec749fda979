"""Find the largest batch size that fits, and the fastest one, by measuring real ``fit`` steps."""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable
from dataclasses import dataclass

import keras
import tensorflow as tf

from tfthroughput._validation import check_positive_int
from tfthroughput.diagnosis._batch_trial import (
    _Ceiling,
    _dataset_maker,
    _default_trial,
    _DoesNotFit,
    _Measured,
)
from tfthroughput.diagnosis.trial_memory import release_free_memory, rss, to_mib

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
    ``max_batch_size`` is reached), then binary-searches between the last size that fit and
    the first that did not. When the largest size that fits, ``F``, is below
    ``max_batch_size``, that is ``d + 1`` doubling trials, with
    ``d = floor(log2(F / min_batch_size)) + 1``, then at most
    ``ceil(log2(min_batch_size * 2**(d - 1)))`` bisection trials: at most
    ``2 * d + ceil(log2(min_batch_size))`` in all (14 for ``min_batch_size=1`` and ``F=100``,
    11 for ``min_batch_size=8`` and ``F=100``), and never more than
    ``2 * floor(log2(max_batch_size / min_batch_size)) + 2 + ceil(log2(min_batch_size))``
    (26 with the defaults). Every trial that fits also measures throughput, so the result
    carries the examples/s curve (the powers of two plus the binary-search points) and its
    best point.

    A default trial clears the Keras session (``keras.backend.clear_session()``) and collects
    garbage, builds a fresh model with ``build_model()``, and runs ``fit`` for one warm-up
    epoch and one timed epoch of ``steps`` steps on batches of that size. It counts as not
    fitting when TensorFlow raises ``tf.errors.ResourceExhaustedError`` (out of device
    memory) or Python raises ``MemoryError``, or when ``memory_limit_mib`` is exceeded. The
    session is cleared again after the last trial, so nothing stays allocated.
    ``clear_session`` resets Keras's global state (layer name counters), as its
    documentation describes.

    With ``memory_limit_mib``, each trial's own peak is measured, so that memory kept from
    earlier trials (``clear_session`` does not return it all) neither counts against a later
    trial nor hides what it needs: before the trial, free heap pages are returned to the
    system (glibc's ``malloc_trim`` after garbage collection), then the trial's peak RSS over
    its own starting RSS is taken from the kernel's high-water mark (reset through
    ``/proc/self/clear_refs`` on Linux; elsewhere RSS is sampled every 10 ms by psutil, which
    can miss shorter spikes). A trial fits when the RSS at the start of the search plus that
    peak stays within the ceiling. Memory the first trial's ``fit`` adds once for the whole
    process (TensorFlow's lazily loaded kernels and caches) is counted in the first trial
    only. Running each trial in a fresh process would count it every time, but costs a
    TensorFlow import and start-up per trial (several seconds each) and needs picklable
    ``build_model`` and ``data``.

    Args:
        build_model: Zero-argument callable returning a new compiled Keras model. Required
            unless ``trial`` is given. To search under a ``tf.distribute`` strategy, build
            inside its ``scope()``: batch sizes are then global (split across the replicas).
        data: Either a callable ``batch_size -> tf.data.Dataset`` of batches of that size
            (repeated as needed), or an unbatched ``tf.data.Dataset`` of single examples,
            which is repeated, batched with ``drop_remainder=True`` and prefetched. Required
            unless ``trial`` is given.
        min_batch_size: First and smallest batch size tried. Defaults to ``1``.
        max_batch_size: Largest batch size tried. Defaults to ``4096``.
        steps: Timed training steps per trial (after as many warm-up steps). Defaults to
            ``5``.
        max_trials: Most trials run; the search stops there and says so. Defaults to ``32``.
        memory_limit_mib: Ceiling on the process RSS a trial may reach, in MiB, counting
            only the trial's own memory on top of the RSS at the start of the search (see
            above), for CPU training where running out of memory swaps or kills the process
            instead of raising. Defaults to ``None``: no ceiling.
        trial: Replaces the default trial (custom measurements, tests): called with a batch
            size, returns examples/s, or ``None`` when it does not fit (raising
            ``tf.errors.ResourceExhaustedError`` or ``MemoryError`` counts as not fitting
            too). Defaults to ``None``: the default trial described above.
        clock: Seconds-returning clock for the default trial. Defaults to
            ``time.perf_counter``.

    Returns:
        A frozen :class:`BatchSizeSearch`.

    Raises:
        TypeError: If an argument has the wrong type, or ``data`` returns no Dataset.
        ValueError: If a number is out of range, ``min_batch_size > max_batch_size``, or
            ``build_model``/``data`` are missing without a ``trial``.
        RuntimeError: If even ``min_batch_size`` does not fit.

    Example:
        >>> def build():
        ...     model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10)])
        ...     model.compile("adam", "mse")
        ...     return model
        >>> examples = tf.data.Dataset.from_tensor_slices((x, y))  # doctest: +SKIP
        >>> result = find_batch_size(build, examples, max_batch_size=1024)  # doctest: +SKIP
        >>> result.largest_fitting, result.fastest  # doctest: +SKIP
        >>> print(result)  # doctest: +SKIP
    """
    for name, value in (
        ("min_batch_size", min_batch_size),
        ("max_batch_size", max_batch_size),
        ("steps", steps),
        ("max_trials", max_trials),
    ):
        check_positive_int(name, value)
    if min_batch_size > max_batch_size:
        raise ValueError(
            "`min_batch_size` must not exceed `max_batch_size`. Received: "
            f"min_batch_size={min_batch_size}, max_batch_size={max_batch_size}"
        )
    check_positive_int("memory_limit_mib", memory_limit_mib, allow_none=True)
    if not callable(clock):
        raise TypeError(f"`clock` must be callable. Received: clock={clock!r}")
    if trial is not None:
        if not callable(trial):
            raise TypeError(
                f"`trial` must be a callable (batch_size -> examples/s or None). "
                f"Received: trial={trial!r}"
            )
        run_trial = trial
    else:
        if build_model is None or data is None:
            raise ValueError(
                "`build_model` and `data` are required unless `trial` is given. Received: "
                f"build_model={build_model!r}, data={data!r}"
            )
        if not callable(build_model):
            raise TypeError(
                "`build_model` must be a callable returning a compiled keras.Model. "
                f"Received: build_model={build_model!r}"
            )
        make_dataset = _dataset_maker(data)
        ceiling = None
        if memory_limit_mib is not None:
            keras.backend.clear_session()
            release_free_memory()
            ceiling = _Ceiling(memory_limit_mib * 2**20, rss())

        def run_trial(batch_size: int) -> _Measured:
            return _default_trial(build_model, make_dataset, batch_size, steps, ceiling, clock)

    try:
        return _search(run_trial, min_batch_size, max_batch_size, max_trials)
    finally:
        if trial is None:
            keras.backend.clear_session()


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
