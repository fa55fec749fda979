"""The ``tfthroughput`` command: ``demo``, ``info``, ``report``, ``service`` and ``tune``.

A command is two functions: ``_add_<name>(commands)`` declares it through :func:`_add_command`
(which also gives it ``--verbose``) with its options, and a runner ``(args) -> exit status``.
:func:`main` turns every failure into one line on stderr and exit status 1 (argparse's usage
errors exit 2). By default TensorFlow's C++ start-up log is kept off the terminal;
``--verbose`` shows it, and the traceback of a failure.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from tfthroughput import __version__
from tfthroughput._optional import missing_package_error
from tfthroughput._startup import load_tensorflow
from tfthroughput._validation import check_writable_folder
from tfthroughput.demo_runs import replace_previous_runs

Runner = Callable[[argparse.Namespace], int]

# Failures a user causes and can fix from the message alone; anything else is reported with its
# type, and --verbose shows where it came from.
_USER_ERRORS = (ImportError, OSError, TypeError, ValueError)
_OP_ERROR_WRAPPING = ("Graph execution error:", "Detected at node", "<stack traces unavailable>")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _add_verbose(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=default,
        help="show TensorFlow's start-up log, and the traceback of a failure",
    )


def _add_command(
    commands: argparse._SubParsersAction, name: str, run: Runner, *, help: str, description: str
) -> argparse.ArgumentParser:
    command = commands.add_parser(name, help=help, description=description)
    # Accepted after the command name too; SUPPRESS keeps a --verbose given before it.
    _add_verbose(command, default=argparse.SUPPRESS)
    command.set_defaults(run=run)
    return command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfthroughput",
        description="Keep the accelerator busy in TensorFlow/Keras training.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_verbose(parser, default=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_demo(commands)
    _add_info(commands)
    _add_report(commands)
    _add_service(commands)
    _add_tune(commands)
    return parser


# --- demo ---------------------------------------------------------------------------------------


def _add_demo(commands: argparse._SubParsersAction) -> None:
    demo = _add_command(
        commands,
        "demo",
        _demo,
        help="train a small CNN on synthetic JPEGs with a naive pipeline and with "
        "build_pipeline, monitored, then diagnose (no network or GPU needed)",
        description="Writes a synthetic JPEG dataset, trains a small CNN on a naive tf.data "
        "pipeline and on build_pipeline with GPUMonitor on, prints a comparison and a "
        "diagnosis, and says how to open the runs in TensorBoard.",
    )
    demo.add_argument(
        "--images",
        type=_positive_int,
        default=1280,
        help="synthetic JPEGs to write (default: %(default)s)",
    )
    demo.add_argument(
        "--epochs",
        type=_positive_int,
        default=3,
        help="epochs per training run (default: %(default)s)",
    )
    demo.add_argument(
        "--batch-size",
        type=_positive_int,
        default=32,
        help="examples per batch (default: %(default)s)",
    )
    demo.add_argument(
        "--log-dir",
        default="logs/tfthroughput-demo",
        help="TensorBoard log folder (default: %(default)s)",
    )
    demo.add_argument(
        "--data-dir", default=None, help="where to write the JPEGs (default: <log-dir>/data)"
    )
    demo.add_argument(
        "--no-tune",
        dest="tune",
        action="store_false",
        help="skip the last part, tfthroughput.tune on a small launch-bound model (about 8 s)",
    )


def _demo(args: argparse.Namespace) -> int:
    # Both folders are written to only after training: check them before TensorFlow loads.
    log_dir = check_writable_folder("--log-dir", args.log_dir)
    data_dir = check_writable_folder("--data-dir", args.data_dir or os.path.join(log_dir, "data"))
    replace_previous_runs(log_dir)  # before TensorFlow loads: a foreign run fails at once
    load_tensorflow(verbose=args.verbose)
    from tfthroughput.demo import run_demo

    run_demo(
        images=args.images,
        epochs=args.epochs,
        batch_size=args.batch_size,
        log_dir=log_dir,
        data_dir=data_dir,
        tune=args.tune,
    )
    return 0


# --- info ---------------------------------------------------------------------------------------


def _add_info(commands: argparse._SubParsersAction) -> None:
    _add_command(
        commands,
        "info",
        _info,
        help="TensorFlow/Keras versions, devices, NVML status and the precision recommendation",
        description="Prints what tfthroughput sees on this machine.",
    )


def _info(args: argparse.Namespace) -> int:
    load_tensorflow(verbose=args.verbose)
    import keras
    import tensorflow as tf

    from tfthroughput.hardware.discovery import find_gpus
    from tfthroughput.precision.precision_recommendation import recommend_precision

    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}")
    devices = tf.config.list_physical_devices()
    print("TensorFlow devices: " + ", ".join(device.name for device in devices))
    gpus = find_gpus()
    if gpus.driver_version is None:
        print(f"NVML: unavailable: {gpus.reason}")
    elif not gpus.devices:
        print(f"NVML: driver {gpus.driver_version}; {gpus.reason}")
    else:
        count = len(gpus.devices)
        print(f"NVML: driver {gpus.driver_version}, {count} GPU(s) visible to this process")
        for gpu in gpus.devices:
            print(f"  gpu{gpu.index}: {gpu.name} ({gpu.uuid})")
    print(recommend_precision())
    return 0


# --- report -------------------------------------------------------------------------------------


def _add_report(commands: argparse._SubParsersAction) -> None:
    report = _add_command(
        commands,
        "report",
        _report,
        help="one self-contained HTML file comparing the GPUMonitor runs under LOGDIR",
        description="Reads the GPUMonitor runs under LOGDIR (TensorBoard event files) and "
        "writes one HTML file, viewable offline: per-epoch charts of GPU-Util, SM activity, "
        "GPU memory, host CPU, examples/s and epoch time, a table of each run's medians with "
        "ratios to the first run, and each run's diagnosis where one was written. Needs "
        "matplotlib (the report extra).",
    )
    report.add_argument("logdir", metavar="LOGDIR", help="TensorBoard log folder")
    report.add_argument(
        "-o", "--output", default=None, help="HTML file to write (default: LOGDIR/report.html)"
    )


def _report(args: argparse.Namespace) -> int:
    import types

    # The report reads event files with TensorBoard's pure-Python reader; left to itself,
    # TensorBoard would import TensorFlow for that, which costs seconds and log lines here.
    stub_marker = "tensorboard.compat.notf"
    sys.modules.setdefault(stub_marker, types.ModuleType(stub_marker))
    from tfthroughput.report.html import write_report

    print(f"wrote {write_report(args.logdir, args.output)}")
    return 0


# --- service ------------------------------------------------------------------------------------


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {text!r}")
    return value


def _advertised_host(text: str) -> str:
    from tfthroughput.data.service_cluster import check_advertised_host

    try:
        return check_advertised_host(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_service(commands: argparse._SubParsersAction) -> None:
    service = _add_command(
        commands,
        "service",
        _service,
        help="run a tf.data service (a dispatcher and worker processes) on this machine "
        "until Ctrl-C, for build_pipeline(..., service=...)",
        description="Starts a tf.data service dispatcher in this process and --workers worker "
        "processes, prints the dispatcher's address, and serves until Ctrl-C. TensorFlow's "
        "servers listen on all network interfaces (it has no bind-address option); --host "
        "only sets the address they advertise, so keep the ports firewalled on a shared "
        "network.",
    )
    service.add_argument(
        "--workers", type=_positive_int, default=2, help="worker processes (default: %(default)s)"
    )
    service.add_argument(
        "--port",
        type=_port,
        default=5050,
        help="the dispatcher's port; 0 picks a free one (default: %(default)s)",
    )
    service.add_argument(
        "--worker-port",
        type=_port,
        default=0,
        help="the first worker's port, the others following; 0 picks free ports (default)",
    )
    service.add_argument(
        "--host",
        type=_advertised_host,
        default="localhost",
        help="name or IP that trainers use to reach this machine, advertised for the workers "
        "and printed in the address (default: %(default)s, loopback only)",
    )


def _service(args: argparse.Namespace) -> int:
    load_tensorflow(verbose=args.verbose)
    from tfthroughput.data.service_cluster import LocalDataService

    # Errors starting the cluster (a port in use, no dispatcher answering) are OSErrors or
    # ValueErrors: `main` prints them as one line.
    cluster = LocalDataService(
        args.workers,
        port=args.port,
        worker_port=args.worker_port,
        host=args.host,
        processes=True,
    )
    with cluster:
        print(cluster, "Ctrl-C stops the service.", sep="\n", flush=True)
        try:
            problem = cluster.wait()
        except KeyboardInterrupt:  # the way to stop it, not a failure
            print("Stopping the tf.data service.", flush=True)
            return 0
    raise RuntimeError(problem)


# --- tune ---------------------------------------------------------------------------------------


def _add_tune(commands: argparse._SubParsersAction) -> None:
    tune = _add_command(
        commands,
        "tune",
        _tune,
        help="try steps_per_execution, XLA, precision and the input pipeline on your model "
        "and print the fastest setup that keeps the loss",
        description="Calls FUNCTION from MODULE (a module name or a .py file), which takes no "
        "arguments and returns a dict with build_model (a function returning a new compiled "
        "model), data (what fit takes) and, for arrays or an unbatched dataset, batch_size; "
        "or a tuple (build_model, data[, batch_size]). Runs tfthroughput.tune on it and prints "
        "the trials table, the chosen setup and a snippet. With --inference it tunes "
        "model.predict instead (data: what predict takes).",
    )
    tune.add_argument("workload", metavar="MODULE:FUNCTION", help="e.g. train.py:tune_inputs")
    tune.add_argument(
        "--budget", type=float, default=180.0, help="seconds the search may take (default: 180)"
    )
    tune.add_argument(
        "--steps", type=_positive_int, default=128, help="timed steps per run (default: 128)"
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


def _tune(args: argparse.Namespace) -> int:
    if os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":
        load_tensorflow(verbose=args.verbose)
    from tfthroughput.tuning import tune
    from tfthroughput.tuning.workload import inference_arguments, load_workload

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


# --- entry point --------------------------------------------------------------------------------


def _failure_line(command: str, error: Exception) -> str:
    """The one line a failed command prints: what went wrong, and the error's type if unusual."""
    text = str(error)
    # TensorFlow wraps the cause of a failed op in a header and the op's stack; its cause is
    # the first line that is neither (stack lines are indented).
    causes = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line[0].isspace() and not line.startswith(_OP_ERROR_WRAPPING)
    ]
    message = causes[0] if causes else (text.strip().splitlines() or ["(no message)"])[0]
    if not isinstance(error, _USER_ERRORS):
        message = f"{type(error).__name__}: {message} (--verbose shows the traceback)"
    return f"tfthroughput {command}: error: {message}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tfthroughput`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        try:
            return args.run(args)
        except ImportError as error:  # a missing package: say which line installs it
            clear = missing_package_error(f"tfthroughput {args.command}", error)
            if clear is None:
                raise
            raise clear from error
    except KeyboardInterrupt:
        print(f"tfthroughput {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if args.verbose:
            raise
        print(_failure_line(args.command, error), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
