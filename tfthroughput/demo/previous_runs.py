"""The demo's runs in its log folder: each demo replaces the runs the previous one wrote.

TensorBoard draws every event file of a run folder as one line, so a second demo appending to
the first one's folders would make its lines jump back to step 0. The demo marks the folder it
wrote, and a later demo removes its own runs (and only those) before it trains. Imports no
TensorFlow, so the command checks the folder before TensorFlow loads.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from tfthroughput.report.html import REPORT_FILE_NAME

# The runs the demo writes under its log folder: one per pipeline, and tune's (its Text tab).
# All of them go, so a second demo never leaves an earlier run beside its own (a stale tune
# table after `--no-tune` included).
TUNE_RUN = "tune"
RUN_NAMES = ("naive", "build_pipeline", TUNE_RUN)
# The file that says a demo wrote this folder's runs.
DEMO_MARKER = ".tfthroughput-demo"


def replace_previous_runs(log_dir: str, echo: Callable[[str], None] = print) -> list[str]:
    """Remove the runs and the report an earlier demo wrote in ``log_dir``, and mark it.

    Args:
        log_dir: The demo's log folder (it exists and is writable).
        echo: Where the one-line notice goes when runs are replaced.

    Returns:
        The names of the runs removed (empty on a first demo).

    Raises:
        ValueError: If ``log_dir`` holds a folder named like a demo run without the demo's
            marker: someone else's, which is left alone.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> replace_previous_runs(folder)
        []
        >>> os.makedirs(os.path.join(folder, "naive", "hardware"))
        >>> os.makedirs(os.path.join(folder, "tune"))
        >>> replace_previous_runs(folder, echo=lambda line: None)
        ['naive', 'tune']
    """
    marker = os.path.join(log_dir, DEMO_MARKER)
    existing = [name for name in RUN_NAMES if os.path.exists(os.path.join(log_dir, name))]
    if existing and not os.path.exists(marker):
        raise ValueError(
            f"`--log-dir` already holds {', '.join(existing)}, which no demo wrote there: "
            f"choose another folder or remove them. Received: --log-dir={log_dir!r}"
        )
    for name in existing:
        shutil.rmtree(os.path.join(log_dir, name))
    report = os.path.join(log_dir, REPORT_FILE_NAME)
    if existing and os.path.exists(report):
        os.remove(report)
    if existing:
        echo(f"Replacing the previous demo's runs in {log_dir}: {', '.join(existing)}")
    with open(marker, "w", encoding="utf-8") as file:
        file.write("Written by `tfthroughput demo`: a later demo replaces its runs here.\n")
    return existing
