"""``tfthroughput tune [OPTIONS] SCRIPT [ARGS...]`` (or ``-m MODULE``): tune an unchanged script.

The script runs as ``tfthroughput run`` runs it (:mod:`tfthroughput.cli.script_runner`) until
its ``--call``-th ``fit`` (``predict`` with ``--inference``), where autolog's patch hands the
call over (:mod:`tfthroughput.monitor.call_capture`) and the script stops, nothing trained. The
model is rebuilt as a zero-argument builder (:mod:`tfthroughput.cli.model_rebuild`) and
``tfthroughput.tune`` runs on it with the call's data; the result is printed with the lines to
change in the script. A model that cannot be rebuilt, data that cannot be replayed, a script
that never makes the call: one line each, a non-zero exit, no third-party traceback.
"""

from __future__ import annotations

import argparse
import collections.abc
import os
import sys
import traceback
from typing import Any

from tfthroughput._startup import load_tensorflow
from tfthroughput.cli.script_runner import (
    ScriptNotFound,
    module_target,
    print_traceback,
    run_target,
    script_target,
)

PROG = "tfthroughput tune"


class CannotTune(Exception):
    """Why the captured call cannot be tuned, as one line for the user (exit status 2)."""


def run(args: argparse.Namespace) -> int:
    """Run the script to its call, tune it, print the result; returns the exit status."""
    try:
        target, script_args = _target(args)
    except ScriptNotFound as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    if os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":
        load_tensorflow(verbose=args.verbose)
    kind = "predict" if args.inference else "fit"
    captured, ending = _run_to_call(target, script_args, kind, args.call)
    if captured is None:
        return _no_call(ending, kind, args.call)
    try:
        result = _tune(captured, args)
    except CannotTune as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    print(result)
    print()
    print(_lines_to_change(result, captured.site, kind))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            file.write(result.to_json())
    return 0


def _target(args: argparse.Namespace):
    if not args.workload:
        what = "MODULE" if args.module else "SCRIPT or MODULE:FUNCTION"
        raise ScriptNotFound(f"{what}: missing. Received: nothing to run")
    if args.max_batch_latency_ms is not None and not args.inference:
        raise ScriptNotFound("--max-batch-latency-ms applies to --inference only")
    first, *rest = args.workload
    return (module_target(first) if args.module else script_target(first)), rest


def _run_to_call(target, script_args: list[str], kind: str, number: int):
    """The captured call (with ``site``, where the script made it) and how the script ended."""
    from tfthroughput.monitor import keras_patch
    from tfthroughput.monitor.call_capture import CaptureStopsTheScript, capture

    taken = []
    script_file = target.code.co_filename

    def on_call(call):
        frames = [f for f in traceback.extract_stack() if f.filename == script_file]
        call.site = f"{os.path.basename(script_file)}:{frames[-1].lineno}" if frames else None
        taken.append(call)
        raise CaptureStopsTheScript

    keras_patch.patch(lambda kind, callbacks: None)  # no monitors: only the hook is wanted
    capture(kind, number, on_call)
    try:
        ending = run_target(target, script_args)
    finally:
        keras_patch.unpatch()
    return (taken[0] if taken else None), ending


def _no_call(ending, kind: str, number: int) -> int:
    sys.stdout.flush()
    if ending.error is not None:
        print_traceback(ending.error)
    elif ending.message is not None:
        print(ending.message, file=sys.stderr)
    which = f"a {kind}" if number == 1 else f"{number} {kind} calls"
    print(
        f"{PROG}: the script ended before making {which} (exit status {ending.exit_code}); "
        f"nothing to tune",
        file=sys.stderr,
    )
    return ending.exit_code or 1


def _tune(captured, args: argparse.Namespace):
    from tfthroughput.cli.model_rebuild import CannotRebuild, builder
    from tfthroughput.tuning import tune

    data, extra = _tune_data(captured.arguments, args.inference)
    try:
        build_model = builder(captured.model, captured.compile_arguments, captured.weights)
    except CannotRebuild as error:
        raise CannotTune(str(error)) from None
    mode = (
        {"mode": "inference", "max_batch_latency_ms": args.max_batch_latency_ms}
        if args.inference
        else {"allow_batch_change": args.allow_batch_change}
    )
    try:
        return tune(
            build_model,
            data,
            **extra,
            time_budget=args.budget,
            steps=args.steps,
            log_dir=args.log_dir,
            **mode,
        )
    except (TypeError, ValueError, RuntimeError) as error:
        raise CannotTune(f"tune cannot run on this call: {error}") from None


def _tune_data(arguments: dict[str, Any], inference: bool) -> tuple[Any, dict[str, Any]]:
    """What tune takes as ``data``, and its ``batch_size`` and ``steps_per_epoch``."""
    x, y = arguments.get("x"), arguments.get("y")
    if isinstance(x, collections.abc.Iterator):  # a generator: iterating it consumes it
        raise CannotTune(
            f"the call's data is a one-shot {type(x).__name__}, which cannot be replayed for "
            "every trial; pass a tf.data.Dataset (tf.data.Dataset.from_generator), a "
            "keras.utils.PyDataset or arrays instead"
        )
    import keras

    batched = _is_dataset(x) or isinstance(x, keras.utils.PyDataset)
    extra = {} if batched else {"batch_size": arguments.get("batch_size") or 32}
    if inference:
        return x, extra
    if arguments.get("steps_per_epoch") is not None:
        extra["steps_per_epoch"] = arguments["steps_per_epoch"]
    return (x if y is None else (x, y)), extra


def _is_dataset(x: Any) -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(x, tf.data.Dataset)


def _lines_to_change(result, site: str | None, kind: str) -> str:
    """The edits that give the script the chosen setup, in its own terms."""
    if not result.improved:
        return "Lines to change: none (the script's setup is the fastest found)."
    lines = ["Lines to change in the script:"]
    chosen, baseline = result.chosen, result.baseline
    if chosen.policy != baseline.policy:
        policy = f"tfthroughput.mixed_precision({chosen.policy!r})"
        lines.append(f"  before the model is built: {policy}")
    kwargs = ", ".join(f"{k}={v!r}" for k, v in result.compile_kwargs.items())
    lines.append(f"  model.compile(..., {kwargs})")
    call = f"the {kind} call" + (f" at {site}" if site else "")
    pipeline = getattr(result, "pipeline_kwargs", None)
    if pipeline is not None:
        built = ", ".join(f"{k}={v!r}" for k, v in pipeline.items())
        lines.append(f"  data = tfthroughput.build_pipeline(data, {built}), passed to {call}")
    elif chosen.batch_size != baseline.batch_size:
        lines.append(f"  {call}: {kind}(..., batch_size={chosen.batch_size})")
    return "\n".join(lines)
