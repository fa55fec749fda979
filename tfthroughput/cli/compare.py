"""``tfthroughput compare BASE_LOGDIR NEW_LOGDIR``: the throughput gate for CI.

Exit codes: 0 when every run is within the noise, faster, or slower but not below
``--fail-below``; 3 when a run is slower beyond the noise and below it; 4 when a run is on one
side only or has no examples/s; 2 for bad input (one line naming the argument and value).
"""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Callable

from tfthroughput.cli.options import SubParsers, add_command

DEFAULT_FAIL_BELOW = 0.95


def add(commands: SubParsers) -> None:
    """Declare ``compare`` and its options."""
    compare = add_command(
        commands,
        "compare",
        run,
        help="a CI gate: the steady examples/s of each run under NEW_LOGDIR against the run of "
        "the same name under BASE_LOGDIR",
        description="Matches the GPUMonitor runs of two log folders by name (fit-1, fit-2, ...) "
        "and compares their steady examples/s (the epochs after the first): within the noise "
        "when the epochs' ranges overlap, faster, or slower. Exits 3 when a run is slower "
        "beyond the noise and below --fail-below, 4 when a run is on one side only or has no "
        "examples/s, 0 otherwise; one line per run.",
    )
    compare.add_argument("base", metavar="BASE_LOGDIR", help="the baseline's log folder")
    compare.add_argument("new", metavar="NEW_LOGDIR", help="the log folder under test")
    compare.add_argument(
        "--fail-below",
        default=DEFAULT_FAIL_BELOW,
        metavar="RATIO",
        help=f"fail when a run is slower beyond the noise and new/base is below RATIO, in "
        f"(0, 1] (default: {DEFAULT_FAIL_BELOW})",
    )
    compare.add_argument("--json", action="store_true", help="print the findings as JSON")


def run(args: argparse.Namespace) -> int:
    """Compare the two folders; returns the gate's exit code (2 for bad input)."""
    try:
        gate = checked_gate(args.base, args.fail_below, argument="BASE_LOGDIR")
    except ValueError as error:
        print(f"tfthroughput compare: error: {error}", file=sys.stderr)
        return 2
    return gate(args.new, json_output=args.json, out=sys.stdout)


def checked_gate(base: str, fail_below: object, argument: str = "--baseline") -> Callable[..., int]:
    """Check the baseline and the threshold now (ValueError naming them); returns the gate to
    run against a new folder later, which prints its findings and returns the exit code."""
    _use_tensorboard_without_tensorflow()
    from tfthroughput.report.run_comparison import compare_runs
    from tfthroughput.report.throughput_gate import check_fail_below, throughput_gate

    threshold = check_fail_below(DEFAULT_FAIL_BELOW if fail_below is None else fail_below)
    try:
        compare_runs(base)
    except (OSError, ValueError) as error:
        raise ValueError(f"{argument} has no monitored run ({error}). Received: {base!r}") from None

    def gate(new: str, *, json_output: bool = False, out=sys.stderr) -> int:
        try:
            result = throughput_gate(base, new, threshold)
        except (OSError, ValueError) as error:
            print(f"tfthroughput compare: error: NEW_LOGDIR: {error}", file=sys.stderr)
            return 2
        print(result.to_json() if json_output else "\n".join(result.lines()), file=out)
        return result.exit_code

    return gate


def _use_tensorboard_without_tensorflow() -> None:
    """Read event files with TensorBoard's pure-Python reader (as ``report`` does), unless the
    process has TensorFlow already."""
    if "tensorflow" not in sys.modules:
        stub_marker = "tensorboard.compat.notf"
        sys.modules.setdefault(stub_marker, types.ModuleType(stub_marker))
