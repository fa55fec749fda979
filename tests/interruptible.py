"""Child processes that a test interrupts with SIGINT, as Ctrl-C in a terminal would.

A child inherits an ignored SIGINT (across ``exec``) and a blocked one (the signal mask) from
the process that starts it, and Python installs its ``KeyboardInterrupt`` handler only where
SIGINT starts at its default action. In one full run under pytest-xdist, both Ctrl-C tests,
run by the same worker, saw their children ignore SIGINT for 60 and 100 s. A terminal's shell
starts a foreground command with SIGINT at its default action and unblocked: so do these.
"""

from __future__ import annotations

import signal
import subprocess


def interruptible_popen(args: list[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)`` whose child starts as a shell's foreground job."""
    return subprocess.Popen(args, preexec_fn=_sigint_as_in_a_terminal, **kwargs)  # noqa: PLW1509


def signal_state(pid: int) -> str:
    """The process's blocked, ignored and caught signal masks, for a failure message."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return " ".join(
                line.strip() for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))
            )
    except OSError as error:
        return f"(no /proc status: {error})"


def _sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
