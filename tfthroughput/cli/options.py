"""What every ``tfthroughput`` command shares: declaring a command, ``--verbose``, and the
argument types argparse checks (a positive integer, a port).

A command module declares itself with :func:`add_command` (which also gives it ``--verbose``)
and hands it a runner ``(args) -> exit status``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

Runner = Callable[[argparse.Namespace], int]
SubParsers = argparse._SubParsersAction


def positive_int(text: str) -> int:
    """argparse type: a positive integer.

    Example:
        >>> positive_int("3")
        3
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def port(text: str) -> int:
    """argparse type: a port number, 0 (pick a free one) to 65535.

    Example:
        >>> port("0")
        0
    """
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {text!r}")
    return value


def add_verbose(parser: argparse.ArgumentParser, default: object) -> None:
    """Give ``parser`` the ``--verbose`` flag."""
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=default,
        help="show TensorFlow's start-up log, and the traceback of a failure",
    )


def add_command(
    commands: SubParsers, name: str, run: Runner, *, help: str, description: str
) -> argparse.ArgumentParser:
    """Declare the command ``name``, run by ``run``; returns its parser, for its options."""
    command = commands.add_parser(name, help=help, description=description)
    # Accepted after the command name too; SUPPRESS keeps a --verbose given before it.
    add_verbose(command, default=argparse.SUPPRESS)
    command.set_defaults(run=run)
    return command
