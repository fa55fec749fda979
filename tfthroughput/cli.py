"""The ``tfthroughput`` command: ``demo``, ``info`` and ``report``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfthroughput",
        description="Keep the accelerator busy in TensorFlow/Keras training.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="train a small CNN on synthetic JPEGs with a naive pipeline and with "
        "build_pipeline, monitored, then diagnose (no network or GPU needed)",
        description="Writes a synthetic JPEG dataset, trains a small CNN on a naive tf.data "
        "pipeline and on build_pipeline with GPUMonitor on, prints a comparison and a "
        "diagnosis, and says how to open the runs in TensorBoard.",
    )
    demo.add_argument(
        "--images",
        type=_positive_int,
        default=1200,
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

    commands.add_parser(
        "info",
        help="TensorFlow/Keras versions, devices, NVML status and the precision recommendation",
        description="Prints what tfthroughput sees on this machine.",
    )
    report = commands.add_parser(
        "report",
        help="one self-contained HTML file comparing the GPUMonitor runs under LOGDIR",
        description="Reads the GPUMonitor runs under LOGDIR (TensorBoard event files) and "
        "writes one HTML file, viewable offline: per-epoch charts of GPU-Util, SM activity, "
        "GPU memory, host CPU, examples/s and epoch time, a table of each run's medians with "
        "ratios to the first run, and each run's diagnosis where one was written. Needs "
        "matplotlib (pip install 'tfthroughput[report]').",
    )
    report.add_argument("logdir", metavar="LOGDIR", help="TensorBoard log folder")
    report.add_argument(
        "-o", "--output", default=None, help="HTML file to write (default: LOGDIR/report.html)"
    )
    return parser


def _info() -> int:
    import keras
    import tensorflow as tf

    from tfthroughput.hardware.discovery import find_gpus
    from tfthroughput.precision.policy import recommend_precision

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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tfthroughput`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.command == "info":
        return _info()
    if args.command == "report":
        import types

        # The report reads event files with TensorBoard's pure-Python reader; left to itself,
        # TensorBoard would import TensorFlow for that, which costs seconds and log lines here.
        stub_marker = "tensorboard.compat.notf"
        sys.modules.setdefault(stub_marker, types.ModuleType(stub_marker))
        from tfthroughput.monitor.run_report_html import write_report

        try:
            print(f"wrote {write_report(args.logdir, args.output)}")
        except (ImportError, OSError, ValueError) as error:
            print(f"tfthroughput report: error: {error}", file=sys.stderr)
            return 1
        return 0
    from tfthroughput.demo import run_demo

    try:
        run_demo(
            images=args.images,
            epochs=args.epochs,
            batch_size=args.batch_size,
            log_dir=args.log_dir,
            data_dir=args.data_dir,
        )
    except (OSError, ValueError) as error:
        print(f"tfthroughput demo: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
