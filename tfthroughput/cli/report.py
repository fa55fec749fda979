"""``tfthroughput report``: one self-contained HTML page comparing the runs under a folder."""

from __future__ import annotations

import argparse
import sys
import types

from tfthroughput.cli.options import SubParsers, add_command


def add(commands: SubParsers) -> None:
    """Declare ``report`` and its options."""
    report = add_command(
        commands,
        "report",
        run,
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


def run(args: argparse.Namespace) -> int:
    """Write the report; returns the exit status."""
    # The report reads event files with TensorBoard's pure-Python reader; left to itself,
    # TensorBoard would import TensorFlow for that, which costs seconds and log lines here.
    stub_marker = "tensorboard.compat.notf"
    sys.modules.setdefault(stub_marker, types.ModuleType(stub_marker))
    from tfthroughput.report.html import write_report

    print(f"wrote {write_report(args.logdir, args.output)}")
    return 0
