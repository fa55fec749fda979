"""``tfthroughput demo``: the monitored demo, checked before TensorFlow loads."""

from __future__ import annotations

import argparse
import os

from tfthroughput._startup import load_tensorflow
from tfthroughput._validation import check_writable_folder
from tfthroughput.cli.options import SubParsers, add_command, positive_int
from tfthroughput.demo.previous_runs import replace_previous_runs


def add(commands: SubParsers) -> None:
    """Declare ``demo`` and its options."""
    demo = add_command(
        commands,
        "demo",
        run,
        help="train a small CNN on synthetic JPEGs with a naive pipeline and with "
        "build_pipeline, monitored, then diagnose (no network or GPU needed)",
        description="Writes a synthetic JPEG dataset, trains a small CNN on a naive tf.data "
        "pipeline and on build_pipeline with GPUMonitor on, prints a comparison and a "
        "diagnosis, and says how to open the runs in TensorBoard.",
    )
    demo.add_argument(
        "--images",
        type=positive_int,
        default=1280,
        help="synthetic JPEGs to write (default: %(default)s)",
    )
    demo.add_argument(
        "--epochs",
        type=positive_int,
        default=3,
        help="epochs per training run (default: %(default)s)",
    )
    demo.add_argument(
        "--batch-size",
        type=positive_int,
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


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit status."""
    # Both folders are written to only after training: check them before TensorFlow loads.
    log_dir = check_writable_folder("--log-dir", args.log_dir)
    data_dir = check_writable_folder("--data-dir", args.data_dir or os.path.join(log_dir, "data"))
    replace_previous_runs(log_dir)  # before TensorFlow loads: a foreign run fails at once
    load_tensorflow(verbose=args.verbose)
    from tfthroughput.demo.run import run_demo

    run_demo(
        images=args.images,
        epochs=args.epochs,
        batch_size=args.batch_size,
        log_dir=log_dir,
        data_dir=data_dir,
        tune=args.tune,
    )
    return 0
