"""``tfthroughput tune [OPTIONS] SCRIPT [ARGS...]`` (or ``-m MODULE``): tune an unchanged script.

The script runs as ``tfthroughput run`` runs it (:mod:`tfthroughput.cli.script_runner`) until
its ``--call``-th ``fit`` (``predict`` with ``--inference``), where autolog's patch hands the
call over (:mod:`tfthroughput.monitor.call_capture`) and the script stops, nothing trained. The
model is rebuilt as a zero-argument builder (:mod:`tfthroughput.tuning.script.model_rebuild`) and
``tfthroughput.tune`` runs on it with the call's data; the result is printed with the lines to
change in the script. A model that cannot be rebuilt, data that cannot be replayed, a script
that never makes the call: one line each, a non-zero exit, no third-party traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from tfthroughput._startup import load_tensorflow
from tfthroughput.cli.script_runner import (
    ScriptNotFound,
    module_target,
    print_traceback,
    run_target,
    script_target,
)
from tfthroughput.tuning.script.captured_call import CannotTune

PROG = "tfthroughput tune"


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
    if args.apply:
        return _run_applying(target, script_args, kind, args)
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
    print(_lines_to_change(result, captured.site, kind, captured.arguments))
    _write_json(result, args.json)
    return 0


def _write_json(result, path: str | None) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as file:
            file.write(result.to_json())


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

    def on_call(call):
        call.site = _site(target)
        taken.append(call)
        raise CaptureStopsTheScript

    keras_patch.patch(lambda kind, callbacks, model: None)  # no monitors: the hook only
    capture(kind, number, on_call)
    try:
        ending = run_target(target, script_args)
    finally:
        keras_patch.unpatch()
    return (taken[0] if taken else None), ending


def _site(target) -> str | None:
    """Where the script made the call being taken (``train.py:42``)."""
    script_file = target.code.co_filename
    frames = [f for f in traceback.extract_stack() if f.filename == script_file]
    return f"{os.path.basename(script_file)}:{frames[-1].lineno}" if frames else None


def _run_applying(target, script_args: list[str], kind: str, args: argparse.Namespace) -> int:
    """``--apply``: the script runs to its end under autolog, tuned at the call and given the
    chosen setup from there on; then ``tfthroughput run``'s summary."""
    import tfthroughput
    from tfthroughput.cli.run_summary import print_summary, write_report_quietly
    from tfthroughput.monitor import keras_patch
    from tfthroughput.monitor.autologging import DEFAULT_LOG_DIR
    from tfthroughput.monitor.call_capture import capture
    from tfthroughput.tuning.script.call_apply import apply_at_call, later_calls_hook

    taken = []

    def on_call(call):
        call.site = _site(target)
        taken.append(call)
        try:
            result = _tune(call, args)
        except CannotTune as error:
            print(f"{PROG}: {error}; the script runs on unchanged", file=sys.stderr)
            keras_patch.set_call_hook(None)
            return
        print(result, flush=True)
        _write_json(result, args.json)
        for line in apply_at_call(result, call):
            print(f"{PROG} --apply: {line}", flush=True)
        keras_patch.set_call_hook(later_calls_hook(kind, call.model, result))

    tfthroughput.autolog(log_dir=args.log_dir or DEFAULT_LOG_DIR)
    capture(kind, args.call, on_call)
    try:
        ending = run_target(target, script_args)
    finally:
        calls = tfthroughput.monitor.monitored_calls()
        tfthroughput.autolog(disable=True)
    sys.stdout.flush()
    if ending.error is not None:
        print_traceback(ending.error)
    elif ending.message is not None:
        print(ending.message, file=sys.stderr)
    if not taken:
        _no_call_line(kind, args.call, ending.exit_code)
    try:
        print_summary(calls, write_report_quietly(calls))
    except Exception as error:  # the summary's own fault never changes the script's result
        print(f"{PROG}: no summary ({type(error).__name__}: {error})", file=sys.stderr)
    return ending.exit_code


def _no_call(ending, kind: str, number: int) -> int:
    sys.stdout.flush()
    if ending.error is not None:
        print_traceback(ending.error)
    elif ending.message is not None:
        print(ending.message, file=sys.stderr)
    _no_call_line(kind, number, ending.exit_code)
    return ending.exit_code or 1


def _no_call_line(kind: str, number: int, exit_code: int) -> None:
    which = f"a {kind}" if number == 1 else f"{number} {kind} calls"
    print(
        f"{PROG}: the script ended before making {which} (exit status {exit_code}); "
        f"nothing to tune",
        file=sys.stderr,
    )


def _tune(captured, args: argparse.Namespace):
    from tfthroughput.tuning.script.captured_call import tune_captured

    mode = (
        {"mode": "inference", "max_batch_latency_ms": args.max_batch_latency_ms}
        if args.inference
        else {"allow_batch_change": args.allow_batch_change}
    )
    return tune_captured(
        captured, time_budget=args.budget, steps=args.steps, log_dir=args.log_dir, **mode
    )


def _lines_to_change(result, site: str | None, kind: str, arguments: dict) -> str:
    """The edits that give the script the chosen setup, in its own terms (the call's
    ``arguments`` decide whether the rebuilt pipeline repeats)."""
    from tfthroughput.tuning.script.call_apply import call_pipeline, keyword_text

    if not result.improved:
        return "Lines to change: none (the script's setup is the fastest found)."
    lines = ["Lines to change in the script:"]
    chosen, baseline = result.chosen, result.baseline
    if chosen.policy != baseline.policy:
        policy = f"tfthroughput.mixed_precision({chosen.policy!r})"
        lines.append(f"  before the model is built: {policy}")
    lines.append(f"  model.compile(..., {keyword_text(result.compile_kwargs)})")
    call = f"the {kind} call" + (f" at {site}" if site else "")
    pipeline = getattr(result, "pipeline_kwargs", None)
    if pipeline is not None:
        kwargs, steps_per_epoch = call_pipeline(pipeline, arguments)
        built = f"tfthroughput.build_pipeline(data, {keyword_text(kwargs)})"
        line = f"  data = {built}, passed to {call}"
        if steps_per_epoch is not None:
            line += f" with steps_per_epoch={steps_per_epoch}"
        lines.append(line)
    elif chosen.batch_size != baseline.batch_size:
        lines.append(f"  {call}: {kind}(..., batch_size={chosen.batch_size})")
    return "\n".join(lines)
