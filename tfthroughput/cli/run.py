"""``tfthroughput run SCRIPT [ARGS...]`` (or ``-m MODULE``): the user's unchanged script with
:func:`tfthroughput.autolog` on, then one screen saying what each monitored call measured.

The script runs as ``__main__`` in this process (:mod:`tfthroughput.cli.script_runner`); its
output, traceback and exit code are Python's, with the summary printed between the traceback
and the exit. Nothing the monitor or the report does changes the exit code.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from tfthroughput._startup import load_tensorflow
from tfthroughput.cli.options import SubParsers, add_command
from tfthroughput.cli.script_runner import (
    Ending,
    ScriptNotFound,
    module_target,
    print_traceback,
    run_target,
    script_target,
)

PROG = "tfthroughput run"
SINKS = ("mlflow", "prometheus")


def add(commands: SubParsers) -> None:
    """Declare ``run`` and its options."""
    run_ = add_command(
        commands,
        "run",
        run,
        help="run your training script unchanged, with a GPUMonitor in every fit, evaluate and "
        "predict; print what each measured",
        description="Runs SCRIPT (or, with -m, the module MODULE) as Python would, with "
        "tfthroughput.autolog() on: every Keras fit, evaluate and predict gets a GPUMonitor "
        "writing its own run (fit-1, fit-2, evaluate-1, ...) under --log-dir. When the script "
        "ends, however it ends, prints each call's epochs, steady examples/s, GPU busy and host "
        "CPU with a reading and the next thing to try, writes the HTML report, and exits with "
        "the script's exit code. Options go before SCRIPT; everything after it is the script's.",
    )
    run_.add_argument(
        "--log-dir",
        default=os.path.join("logs", "tfthroughput"),
        help="folder of the runs and the report (default: logs/tfthroughput)",
    )
    run_.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    run_.add_argument(
        "--sink",
        action="append",
        default=[],
        metavar="{mlflow,prometheus[:PORT]}",
        help="also send the figures to MLflow (a run per fit) or serve them to Prometheus "
        "(default port 9400); may be repeated",
    )
    run_.add_argument(
        "--baseline",
        default=None,
        metavar="LOGDIR",
        help="compare the runs with those under LOGDIR afterwards, as `tfthroughput compare`",
    )
    run_.add_argument(
        "--fail-below",
        default=None,
        metavar="RATIO",
        help="with --baseline: fail when a run is slower beyond the noise and below RATIO",
    )
    run_.add_argument(
        "-m",
        dest="module",
        action="store_true",
        help="run a module as `python -m MODULE` does (the next argument names it)",
    )
    run_.add_argument(
        "target", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]", help="what to run"
    )


def run(args: argparse.Namespace) -> int:
    """Run the script and report; returns the script's exit code (2 for bad input)."""
    try:
        sinks = _sinks(args.sink)
        gate = _gate(args)
        target, script_args = _target(args)
    except (ScriptNotFound, ValueError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    if os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":
        load_tensorflow(verbose=args.verbose)
    import tfthroughput
    from tfthroughput.cli.run_summary import print_summary, write_report_quietly
    from tfthroughput.monitor.autologging import finish_left_calls

    tfthroughput.autolog(log_dir=args.log_dir, **({"sinks": sinks} if sinks else {}))
    try:
        ending = run_target(target, script_args)
    finally:
        finish_left_calls()  # before the summary reads the runs' files
        calls = tfthroughput.monitor.monitored_calls()
        tfthroughput.autolog(disable=True)
    _report_ending(ending)
    try:
        print_summary(calls, None if args.no_report else write_report_quietly(calls))
    except Exception as error:  # the summary's own fault never changes the script's result
        print(f"{PROG}: no summary ({type(error).__name__}: {error})", file=sys.stderr)
    exit_code = ending.exit_code
    if gate is not None and exit_code == 0:
        exit_code = gate(args.log_dir)
    if ending.interrupted:
        _end_as_interrupted()
    return exit_code


def _target(args: argparse.Namespace):
    if not args.target:
        what = "MODULE" if args.module else "SCRIPT"
        raise ScriptNotFound(f"{what}: missing. Received: nothing to run")
    first, *rest = args.target
    return (module_target(first) if args.module else script_target(first)), rest


def _sinks(names: list[str]) -> list:
    sinks = []
    for text in names:
        name, _, port = text.partition(":")
        if name not in SINKS or (port and name != "prometheus"):
            raise ValueError(f"--sink must be mlflow or prometheus[:PORT]. Received: {text!r}")
        if name == "mlflow":
            from tfthroughput.sinks import MLflowSink

            sinks.append(MLflowSink(start_run=True))
        else:
            from tfthroughput.sinks import PrometheusSink

            if port and not port.isdigit():
                raise ValueError(f"--sink prometheus:PORT needs a port number. Received: {text!r}")
            sinks.append(PrometheusSink(port=int(port or 9400)))
    return sinks


def _gate(args: argparse.Namespace):
    """The baseline comparison to run after the script, checked now; or None."""
    if args.baseline is None:
        if args.fail_below is not None:
            raise ValueError(f"--fail-below needs --baseline. Received: {args.fail_below}")
        return None
    from tfthroughput.cli.compare import checked_gate

    return checked_gate(args.baseline, args.fail_below)


def _report_ending(ending: Ending) -> None:
    sys.stdout.flush()
    if ending.error is not None:
        print_traceback(ending.error)
    elif ending.message is not None:
        print(ending.message, file=sys.stderr)


def _end_as_interrupted() -> None:
    """End as Python does after Ctrl-C: killed by SIGINT (exit status 130 in a shell)."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
