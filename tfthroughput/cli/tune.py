"""``tfthroughput tune``: ``tfthroughput.tune`` on a workload named on the command line."""

from __future__ import annotations

import argparse
import os

from tfthroughput._startup import load_tensorflow
from tfthroughput.cli.options import SubParsers, add_command, positive_int


def add(commands: SubParsers) -> None:
    """Declare ``tune`` and its options."""
    tune = add_command(
        commands,
        "tune",
        run,
        help="try steps_per_execution, XLA, precision and the input pipeline on your model "
        "and print the fastest setup that keeps the loss",
        description="With SCRIPT [ARGS...] (or -m MODULE): runs the script as `tfthroughput "
        "run` does up to its first fit (--call N: its N-th; --inference: predict), rebuilds "
        "the model it trains there and tunes it on that call's data, then stops without "
        "training and prints the lines to change. With MODULE:FUNCTION: calls FUNCTION from "
        "MODULE (a module name or a .py file), which takes no "
        "arguments and returns a dict with build_model (a function returning a new compiled "
        "model), data (what fit takes) and, for arrays or an unbatched dataset, batch_size; "
        "or a tuple (build_model, data[, batch_size]). Runs tfthroughput.tune on it and prints "
        "the trials table, the chosen setup and a snippet. With --inference it tunes "
        "model.predict instead (data: what predict takes).",
    )
    tune.set_defaults(tune_parser=tune)
    tune.add_argument(
        "-m",
        dest="module",
        action="store_true",
        help="the script is a module, run as `python -m MODULE` does",
    )
    tune.add_argument(
        "--apply",
        action="store_true",
        help="with SCRIPT: after tuning, the script goes on from that call with the chosen "
        "setup on its model (this and later calls), then `tfthroughput run`'s summary",
    )
    tune.add_argument(
        "--call",
        type=positive_int,
        default=1,
        help="with SCRIPT: tune the script's N-th fit (predict) call (default: 1)",
    )
    tune.add_argument(
        "--budget", type=float, default=180.0, help="seconds the search may take (default: 180)"
    )
    tune.add_argument(
        "--steps", type=positive_int, default=128, help="timed steps per run (default: 128)"
    )
    tune.add_argument(
        "--allow-batch-change",
        action="store_true",
        help="also try 2x and 4x batch sizes (changes the learning dynamics)",
    )
    tune.add_argument(
        "--inference",
        action="store_true",
        help="tune model.predict instead of fit: data is what predict takes (inputs only); "
        "tries larger batches, XLA, steps_per_execution and the policy, checks the outputs",
    )
    tune.add_argument(
        "--max-batch-latency-ms",
        type=float,
        default=None,
        help="with --inference: largest p95 latency of one batch, in milliseconds",
    )
    tune.add_argument("--log-dir", default=None, help="write the table to TensorBoard's Text tab")
    tune.add_argument("--json", default=None, help="also write the result as JSON to this file")
    tune.add_argument(
        "workload",
        nargs=argparse.REMAINDER,
        metavar="MODULE:FUNCTION | SCRIPT [ARGS...]",
        help="e.g. train.py:tune_inputs, or train.py --epochs 3 (options go before it)",
    )


def run(args: argparse.Namespace) -> int:
    """Tune the workload and print the result; returns the exit status."""
    if _names_a_script(args):
        from tfthroughput.cli.tune_script import run as tune_a_script

        return tune_a_script(args)
    # MODULE:FUNCTION keeps its meaning, options after it included.
    first, *rest = args.workload or [""]
    args = args.tune_parser.parse_args(rest, namespace=args)
    args.workload = first
    if os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":
        load_tensorflow(verbose=args.verbose)
    from tfthroughput.cli.workload import inference_arguments, load_workload
    from tfthroughput.tuning import tune

    workload = load_workload(args.workload)
    result = tune(
        **workload,
        time_budget=args.budget,
        steps=args.steps,
        allow_batch_change=args.allow_batch_change,
        log_dir=args.log_dir,
        **inference_arguments(args.inference, args.max_batch_latency_ms),
    )
    print(result)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            file.write(result.to_json())
    return 0


def _names_a_script(args: argparse.Namespace) -> bool:
    """Whether the command names a script (a file, a ``.py`` path, ``-m MODULE``) rather than
    ``MODULE:FUNCTION``."""
    if args.module:
        return True
    if not args.workload:
        return False
    first = args.workload[0]
    module, _, function = first.rpartition(":")
    if module and function.isidentifier():
        return False
    return first.endswith(".py") or os.path.isfile(first)
