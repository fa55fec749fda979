"""The screen ``tfthroughput run`` prints on stderr when the script has ended, and its report.

Both read the runs the monitors wrote; a fault in either becomes one line of the summary, never
a change of the script's exit code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from tfthroughput.monitor.autologging import MonitoredCall

_RULE = "-" * 78


def print_summary(calls: Sequence[MonitoredCall], report: str | None) -> None:
    """Print one block per monitored call, then where the runs and the report are."""
    print(summary_text(calls, report), file=sys.stderr)


def summary_text(calls: Sequence[MonitoredCall], report: str | None) -> str:
    from tfthroughput.report.call_summary import read_call_summary

    lines, counted = [], 0
    for call in calls:
        title = _title(call)
        try:
            summary = read_call_summary(call.kind, title, call.run_dir)
        except Exception as error:  # a run that cannot be read: say so, keep the others
            lines.append(f"{title}: not read ({type(error).__name__}: {error})")
            counted += 1
        else:
            lines += summary.lines()
            # A fit is one call; an evaluate or predict run holds each call measured into it.
            counted += 1 if call.kind == "fit" else max(summary.epochs, 1)
    lines = [_RULE, f"tfthroughput: {_calls_line(calls, counted)}", *lines]
    folders = sorted({call.log_dir for call in calls})
    if folders:
        lines.append(f"runs: {', '.join(folders)} (tensorboard --logdir {folders[0]})")
    if report:
        lines.append(f"report: {report}")
    lines.append(_RULE)
    return "\n".join(lines)


def _title(call: MonitoredCall) -> str:
    """A call autolog named by its run; one with its own monitor by that monitor's folder."""
    if call.own_monitor:
        return f"{os.path.join(call.log_dir, call.name)} (its own GPUMonitor)"
    return call.name


def _calls_line(calls: Sequence[MonitoredCall], counted: int) -> str:
    """How many calls were monitored, and in how many runs where a run holds several (a
    model's ``predict`` calls in a loop)."""
    if not calls:
        return "the script called no Keras fit, evaluate or predict: nothing was measured"
    line = f"{counted} monitored call{'s' * (counted != 1)}"
    if counted != len(calls):
        line += f" in {len(calls)} run{'s' * (len(calls) != 1)}"
    return line


def write_report_quietly(calls: Sequence[MonitoredCall]) -> str | None:
    """Write the HTML report of the folder the fits went into; returns its path, or a line
    saying why none was written."""
    folders = sorted({call.log_dir for call in calls if call.kind == "fit"})
    if not folders:
        return None
    try:
        from tfthroughput.report.html import write_report

        return os.fspath(write_report(folders[0]))
    except Exception as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"not written ({message})"
