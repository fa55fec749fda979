"""``autotune()``: the next ``fit`` tuned on a copy of its model, then run with the fastest setup
found; the notebook's face of ``tfthroughput tune --apply``, on the same patch of Keras's
methods as ``autolog()`` (:mod:`tfthroughput.monitor.call_capture`)."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

from tfthroughput._validation import check_bool
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.monitor import keras_patch
from tfthroughput.monitor.call_capture import CapturedCall, capture

# What the call itself gives tune: its model, data, batch and epoch length.
_FROM_THE_CALL = ("build_model", "data", "batch_size", "steps_per_epoch")


def _no_monitors(kind: str, callbacks: list, model: object) -> None:
    """The patch's monitor factory where autotune installs it alone: no monitors, the hook only."""
    return None


def autotune(*, disable: bool = False, **tune_options: Any) -> None:
    """Tune the next ``fit`` this process makes (``predict`` with ``mode="inference"``), then
    let that call, and later calls of the same model, run with the fastest setup found.

    At that call, before Keras trains anything, ``tune`` runs on a copy of the model rebuilt
    from it (its weights then, compiled as it was compiled) with the call's data and batch.
    The table is printed; the chosen setup is put on the model (``steps_per_execution``, XLA)
    and on the call's data (the batch size, the rebuilt pipeline; later calls of the same model
    get the same change), and the call runs on. Your model, its weights and Python's and NumPy's
    random state are those the call would have had: nothing the search trained reaches them.
    A model that cannot be rebuilt, or data that cannot be replayed (a generator), is one
    ``MonitoringWarning`` saying why, and the call runs unchanged. One call is tuned; call
    ``autotune()`` again for another. With ``autolog()`` on, the tuned call is monitored too.

    Args:
        disable: Forget a pending autotune and the data change kept for later calls.
            Defaults to False.
        **tune_options: Passed to ``tune``: ``time_budget``, ``steps``, ``mode``,
            ``allow_batch_change``, ``log_dir``, ... (not ``build_model``, ``data``,
            ``batch_size`` or ``steps_per_epoch``, which the call gives).

    Raises:
        TypeError: For an option ``tune`` does not take, or one the call gives, before
            anything is patched.

    Example:
        >>> import tfthroughput
        >>> tfthroughput.autotune(time_budget=60)  # doctest: +SKIP
        >>> model.fit(x, y, batch_size=32, epochs=5)  # tuned, then trained faster  # doctest: +SKIP
    """
    if check_bool("disable", disable):
        _forget()
        return
    _check_options(tune_options)
    if not keras_patch.is_patched():
        keras_patch.patch(_no_monitors)
    kind = "predict" if tune_options.get("mode") == "inference" else "fit"
    capture(kind, 1, lambda call: _tune_and_apply(kind, call, tune_options))


def _tune_and_apply(kind: str, call: CapturedCall, tune_options: dict[str, Any]) -> None:
    from tfthroughput.tuning.script.call_apply import apply_at_call, later_calls_hook
    from tfthroughput.tuning.script.captured_call import CannotTune, tune_captured

    try:
        result = tune_captured(call, **tune_options)
    except CannotTune as error:
        keras_patch.set_call_hook(None)
        warnings.warn(
            f"tfthroughput.autotune: {error}; the {kind} runs unchanged",
            MonitoringWarning,
            stacklevel=2,
        )
        return
    print(result, flush=True)
    for line in apply_at_call(result, call):
        print(f"tfthroughput.autotune: {line}", flush=True)
    keras_patch.set_call_hook(later_calls_hook(kind, call.model, result))


def _check_options(tune_options: dict[str, Any]) -> None:
    from tfthroughput.tuning import tune

    accepted = set(inspect.signature(tune).parameters) - set(_FROM_THE_CALL)
    for name in tune_options:
        if name in _FROM_THE_CALL:
            raise TypeError(
                f"autotune takes `{name}` from the call it tunes; it cannot be given. "
                f"Received: {name}={tune_options[name]!r}"
            )
        if name not in accepted:
            raise TypeError(
                f"`{name}` is not an option of tune (it takes {', '.join(sorted(accepted))}). "
                f"Received: {name}={tune_options[name]!r}"
            )


def _forget() -> None:
    if keras_patch.monitor_factory() is _no_monitors:  # installed here, autolog is off
        keras_patch.unpatch()
    else:
        keras_patch.set_call_hook(None)
