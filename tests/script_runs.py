"""Users' scripts under `tfthroughput run`, as real subprocesses started as a terminal would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from interruptible import interruptible_popen

ROOT = Path(__file__).resolve().parents[1]


def run_command(args, cwd, popen=False, command_name="run", **kwargs):
    """``tfthroughput run ARGS`` (or ``command_name``) in ``cwd``, the package and ``tests/``
    importable (scripts use ``fakes``); with ``popen``, started so that Ctrl-C reaches it
    as in a terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    paths = [str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    command = [sys.executable, "-m", "tfthroughput.cli", command_name, *args]
    if popen:
        return interruptible_popen(command, cwd=cwd, env=env, text=True, **kwargs)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def write_script(folder: Path, name: str, source: str) -> Path:
    """``source``, dedented, written as ``folder/name``."""
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path
