"""A trial's model in either mode (built by ``engine.trial_runner.TrialRunner`` for ``fit`` and
for ``predict``): the fresh model under a setup (or as given), the failures that end a trial
with a one-line reason, and the device's peak memory."""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from collections.abc import Callable, Iterator

import keras

from tfthroughput._validation import check_model
from tfthroughput.precision.policy import check_mixed_precision_outputs, mixed_precision
from tfthroughput.precision.xla import is_xla_failure
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training.distribution import replica_failure

# What a builder of the model as given may raise unchanged: the user must fix the builder.
USER_MODEL_ERRORS = (TypeError, ValueError)


class TrialFailed(Exception):
    """A trial that cannot be chosen; the message is the reason shown in the table.

    Attributes:
        side: The runner whose run failed, where several were timed together (set by
            ``engine.measure``); ``None`` otherwise.
    """

    side: object = None


# Where an error message starts printing values (an array, a tensor, a list of numbers): the
# user's data never reaches a reason.
_VALUES = re.compile(r"array\(|tf\.Tensor\(|\[\[|\[\s*-?\d+\.\d|\[\s*-?\d+(\s+-?\d+){2,}")


def without_values(text: str) -> str:
    """``text`` cut where it starts printing values, marked by ``...``.

    Example:
        >>> without_values("Dimensions 2 and 1000 are not compatible: [[0.5 1.2] [0.1 0.3]]")
        'Dimensions 2 and 1000 are not compatible: ...'
    """
    found = _VALUES.search(text)
    return text if found is None else text[: found.start()].rstrip() + " ..."


def failure_reason(error: BaseException, step: str) -> str:
    """Why a trial failed, in one line: a replica's failure, XLA that could not compile the
    ``step`` (``"train"``, ``"predict"``) step, out of memory, or the error's first line."""
    known = replica_failure(error)
    if known is not None:
        return known
    lines = str(error).strip().splitlines()
    first = without_values((lines[0] if lines else "")[:160])
    if is_xla_failure(error):
        return f"XLA could not compile the {step} step ({first})"
    name = type(error).__name__
    if name == "ResourceExhaustedError" or isinstance(error, MemoryError):
        return f"out of memory ({name}: {first})"
    return f"{name}: {first}" if first else name


@contextlib.contextmanager
def trial_failures(step: str, passing: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """What the block raises (out of memory, XLA, a replica, ...) becomes :class:`TrialFailed`
    with its :func:`failure_reason`: a failing trial is reported, not raised. ``passing``:
    errors raised unchanged (``USER_MODEL_ERRORS`` for the model as given)."""
    try:
        yield
    except (TrialFailed, *passing):
        raise
    except Exception as error:  # noqa: BLE001 - reported with the reason
        raise TrialFailed(failure_reason(error, step)) from error


def trial_model(
    build_model: Callable[[], keras.Model],
    setup: TuneSetup | None,
    *,
    seed: int,
    batch_size: int | None,
    loop: str,
) -> tuple[keras.Model, TuneSetup, list[str]]:
    """A fresh model from ``seed`` (so every trial starts from the baseline's weights), its
    setup, and its low-precision warnings: :func:`configured_model` under ``setup``, or the
    model as given (``setup`` ``None``), whose setup is read from it at ``batch_size``.

    Args:
        build_model: The user's builder.
        setup: The knobs, or ``None`` for the model as given.
        seed: Seed set before the model is built.
        batch_size: The batch of the model as given.
        loop: ``"train"`` (the model must be compiled) or ``"predict"``.
    """
    keras.utils.set_random_seed(seed)
    if setup is not None:
        model, notes = configured_model(build_model, setup, loop=loop)
        return model, setup, notes
    model = check_model(build_model(), returned_by="build_model", compiled=loop == "train")
    given = TuneSetup(
        int(getattr(model, "steps_per_execution", 1) or 1),
        bool(model.jit_compile),
        keras.config.dtype_policy().name,
        batch_size=batch_size,
    )
    return model, given, []


def configured_model(
    build_model: Callable[[], keras.Model], setup: TuneSetup, *, loop: str
) -> tuple[keras.Model, list[str]]:
    """A model built under ``setup``'s policy with its ``steps_per_execution`` and XLA, and
    the first sentence of each low-precision warning the build gave.

    Args:
        build_model: The user's builder.
        setup: The knobs.
        loop: ``"train"`` (the model must be compiled; its outputs' precision is checked
            here, where a float16 loss would start) or ``"predict"`` (no compile needed;
            its outputs are compared with the baseline's by the output check instead).

    Raises:
        TrialFailed: If a layer does not support XLA and ``setup`` turns it on.
    """
    training = loop == "train"
    with mixed_precision(setup.policy), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = check_model(build_model(), returned_by="build_model", compiled=training)
        model.steps_per_execution = setup.steps_per_execution
        model.jit_compile = setup.jit_compile
        if setup.jit_compile and not model.jit_compile:
            raise TrialFailed("a layer of the model does not support XLA (Keras says so)")
        setattr(model, f"{loop}_function", None)  # rebuilt with the knobs on the next call
        if training and setup.policy != "float32":
            with contextlib.suppress(ValueError):  # not built yet: checked after warm-up
                check_mixed_precision_outputs(model)
    ours = {str(w.message).split(". ")[0] for w in caught if "low precision" in str(w.message)}
    return model, sorted(ours)


def device_peak_bytes() -> int | None:
    """Peak memory of the first GPU where the backend tells it (TensorFlow, JAX), else None;
    TensorFlow's peak is reset by the reading, so the next trial's is its own."""
    tf = sys.modules.get("tensorflow")
    if keras.backend.backend() == "tensorflow" and tf is not None:
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            try:
                peak = tf.config.experimental.get_memory_info(gpus[0].name)["peak"]
                tf.config.experimental.reset_memory_stats(gpus[0].name)
                return int(peak)
            except (ValueError, RuntimeError):
                return None
    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform == "gpu":
            stats = device.memory_stats() or {}
            return stats.get("peak_bytes_in_use")
    return None
