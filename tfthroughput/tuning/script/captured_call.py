"""``tune`` run on a call a running script was about to make (``tfthroughput tune SCRIPT``,
``autotune()``): the model rebuilt from the call (:mod:`tfthroughput.tuning.script.model_rebuild`),
the call's data, and the script's random state left as it was."""

from __future__ import annotations

import collections.abc
from typing import Any

from tfthroughput.monitor.call_capture import CapturedCall


class CannotTune(Exception):
    """Why the captured call cannot be tuned, as one line for the user."""


def tune_captured(call: CapturedCall, **tune_options: Any):
    """``tune`` on a rebuilt copy of ``call``'s model with the call's data, under the
    ``tf.distribute`` strategy the model was built in; the script's own model, weights and
    random state are as they were.

    Args:
        call: The call taken.
        **tune_options: Passed to ``tune`` (``time_budget``, ``steps``, ``mode``, ...).

    Raises:
        CannotTune: If the model cannot be rebuilt, the data cannot be replayed, or ``tune``
            refuses the call (its message in one line).
    """
    from tfthroughput.tuning import tune
    from tfthroughput.tuning.engine.environment import random_state_kept
    from tfthroughput.tuning.script.model_rebuild import CannotRebuild, builder

    inference = tune_options.get("mode") == "inference"
    data, extra = tune_data(call.arguments, inference)
    strategy = getattr(call.model, "_distribute_strategy", None)
    if strategy is not None and "strategy" not in tune_options:
        # Built in a strategy's scope, the model trains under it wherever fit is called;
        # the rebuilt copies are built in that scope too, or they would train on one device.
        extra["strategy"] = strategy
    with random_state_kept():  # the check build below draws too
        try:
            build_model = builder(call.model, call.compile_arguments, call.weights)
        except CannotRebuild as error:
            raise CannotTune(str(error)) from None
        try:
            return tune(build_model, data, **extra, **tune_options)
        except (TypeError, ValueError, RuntimeError) as error:
            raise CannotTune(f"tune cannot run on this call: {error}") from None


def tune_data(arguments: dict[str, Any], inference: bool) -> tuple[Any, dict[str, Any]]:
    """What tune takes as ``data``, and its ``batch_size`` and ``steps_per_epoch``.

    Raises:
        CannotTune: If the data is a one-shot iterator (a generator), which every trial would
            consume.
    """
    x, y = arguments.get("x"), arguments.get("y")
    if isinstance(x, collections.abc.Iterator):  # a generator: iterating it consumes it
        raise CannotTune(
            f"the call's data is a one-shot {type(x).__name__}, which cannot be replayed for "
            "every trial; pass a tf.data.Dataset (tf.data.Dataset.from_generator), a "
            "keras.utils.PyDataset or arrays instead"
        )
    import keras

    from tfthroughput.tuning._arguments import is_dataset

    batched = is_dataset(x) or isinstance(x, keras.utils.PyDataset)
    extra = {} if batched else {"batch_size": arguments.get("batch_size") or 32}
    if inference:
        return x, extra
    if arguments.get("steps_per_epoch") is not None:
        extra["steps_per_epoch"] = arguments["steps_per_epoch"]
    return (x if y is None else (x, y)), extra
