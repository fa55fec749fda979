"""The chosen setup put on a running script's own model and calls (`tfthroughput tune --apply`,
`autotune()`).

At the tuned call: ``steps_per_execution`` and ``jit_compile`` set on the model
(``TuneSetup.apply``, kept by Keras for every later call until the script compiles again), and
the call's data changed where the setup says so (the batch size for arrays, the rebuilt
pipeline). Later calls of the same kind on the same model get the same data change. The dtype
policy cannot be put on a model that is built already: that is said, not done.
"""

from __future__ import annotations

import inspect
from typing import Any

from tfthroughput.monitor.call_capture import CapturedCall
from tfthroughput.tuning._arguments import is_dataset
from tfthroughput.tuning.training.data import training_data


def apply_at_call(result: Any, call: CapturedCall) -> list[str]:
    """Put ``result``'s chosen setup on the call's model and arguments; returns what was
    done (and what could not be), as sentences."""
    if not result.improved:
        return ["the setup as given was the fastest found: the script runs on unchanged"]
    chosen, baseline = result.chosen, result.baseline
    chosen.apply(call.model)
    done = [f"model.compile(..., {keyword_text(result.compile_kwargs)}) set on the script's model"]
    data_change = data_changer(result)
    if data_change is not None:
        done.append(data_change(call.arguments))
    if chosen.policy != baseline.policy:
        done.append(
            f"dtype policy {chosen.policy!r} not applied: the model is built already; build "
            f"it after tfthroughput.mixed_precision({chosen.policy!r}) to get it"
        )
    return done


def data_changer(result: Any):
    """A function changing a call's arguments (in place) to the chosen data setup, returning
    what it did; None where the data stays as given."""
    pipeline = getattr(result, "pipeline_kwargs", None)
    chosen, baseline = result.chosen, result.baseline
    if pipeline is not None:

        def rebuild_pipeline(arguments: dict[str, Any]) -> str:
            from tfthroughput.data.pipeline import build_pipeline

            x, y = arguments.get("x"), arguments.get("y")
            data = x if y is None else (x, y)
            kwargs, steps_per_epoch = call_pipeline(pipeline, arguments)
            arguments["x"] = build_pipeline(data, **kwargs)
            arguments["y"] = None
            arguments["batch_size"] = None
            done = f"data = tfthroughput.build_pipeline(data, {keyword_text(kwargs)})"
            if steps_per_epoch is None:
                return done
            arguments["steps_per_epoch"] = steps_per_epoch
            return f"{done}; fit(..., steps_per_epoch={steps_per_epoch})"

        return rebuild_pipeline
    if chosen.batch_size != baseline.batch_size:

        def new_batch(arguments: dict[str, Any]) -> str:
            arguments["batch_size"] = chosen.batch_size
            return f"batch_size={chosen.batch_size}"

        return new_batch
    return None


def call_pipeline(
    pipeline: dict[str, Any], arguments: dict[str, Any]
) -> tuple[dict[str, Any], int | None]:
    """``build_pipeline``'s arguments for a call, and the ``steps_per_epoch`` to give it
    (None where it keeps its own, or has none and gets a pipeline that ends).

    The search and the confirmation time a repeating pipeline, read on from one epoch to the
    next; a call without ``steps_per_epoch`` ends each epoch at the data's end instead. Where
    the data's length is known (arrays, a dataset whose cardinality ``tf.data`` tells), the
    pipeline keeps repeating and the call gets its batches per pass as ``steps_per_epoch``: the
    same examples an epoch, as they were timed, where a pipeline restarted at every epoch pays
    its start-up each time (``docs/tuning.md``). Other data is given a pipeline that ends at the
    data's end (no ``repeat``). A call passing ``shuffle=False`` gets arrays' pipeline without
    its shuffle."""
    if arguments.get("shuffle") is False and "shuffle_buffer" in pipeline:
        # The call asked fit not to shuffle its arrays: neither does their pipeline.
        pipeline = {key: value for key, value in pipeline.items() if key != "shuffle_buffer"}
    if arguments.get("steps_per_epoch") is not None:
        return dict(pipeline), None
    x, batch_size = arguments.get("x"), pipeline.get("batch_size")
    examples = _array_length(x)
    if examples is not None:
        batch_size = batch_size or arguments.get("batch_size") or 32
        return {**pipeline, "repeat": True}, -(-examples // batch_size)
    # A batched dataset keeps its batches (no batch_size): a pass is its elements.
    batches = training_data(x, batch_size).epoch_batches if is_dataset(x) else None
    if batches is None:
        return {**pipeline, "repeat": False}, None
    return {**pipeline, "repeat": True}, batches


def _array_length(x: Any) -> int | None:
    """Examples in ``x`` when it is arrays (one, a list or a dict of them), else None."""
    import keras

    leaves = keras.tree.flatten(x) if x is not None else []
    if not leaves or not all(getattr(leaf, "shape", None) for leaf in leaves):
        return None
    return int(leaves[0].shape[0])


def later_calls_hook(kind: str, model: Any, result: Any):
    """A call hook (``keras_patch.set_call_hook``) giving later ``kind`` calls of ``model`` the
    same data change; None where there is none."""
    change = data_changer(result) if result.improved else None
    if change is None:
        return None

    def hook(name: str, called: Any, bound: inspect.BoundArguments) -> None:
        if name == kind and called is model:
            arguments = dict(bound.arguments)
            change(arguments)
            for key in ("x", "y", "batch_size", "steps_per_epoch"):  # predict takes no y
                if key in bound.signature.parameters:
                    bound.arguments[key] = arguments.get(key)

    return hook


def keyword_text(values: dict[str, Any]) -> str:
    """Keyword arguments as a call writes them: ``a=1, b='x'``."""
    return ", ".join(f"{k}={v!r}" for k, v in values.items())
