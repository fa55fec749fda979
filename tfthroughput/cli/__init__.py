"""The ``tfthroughput`` command: ``run``, ``compare``, ``demo``, ``info``, ``report``,
``service`` and ``tune``.

One module per command (:mod:`.run`, :mod:`.compare`, :mod:`.demo`, :mod:`.info`,
:mod:`.report`, :mod:`.service`, :mod:`.tune`), each with ``add(commands)``, which declares it
and its options through :func:`tfthroughput.cli.options.add_command` (which also gives it
``--verbose``), and a runner ``run(args) -> exit status``. :func:`main` turns every failure
into one line on stderr and exit status 1 (argparse's usage errors exit 2). By default
TensorFlow's C++ start-up log is kept off the terminal; ``--verbose`` shows it, and the
traceback of a failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tfthroughput import __version__
from tfthroughput._optional import missing_package_error
from tfthroughput.cli import compare, demo, info, report, run, service, tune
from tfthroughput.cli.options import add_verbose

__all__ = ["main"]

# The commands, in the order `--help` lists them.
_COMMANDS = (run, compare, demo, info, report, service, tune)
# Failures a user causes and can fix from the message alone; anything else is reported with its
# type, and --verbose shows where it came from.
_USER_ERRORS = (ImportError, OSError, TypeError, ValueError)
_OP_ERROR_WRAPPING = ("Graph execution error:", "Detected at node", "<stack traces unavailable>")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfthroughput",
        description="Keep the accelerator busy in TensorFlow/Keras training.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_verbose(parser, default=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in _COMMANDS:
        command.add(commands)
    return parser


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
