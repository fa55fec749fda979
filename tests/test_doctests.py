"""Docstring examples run as written, or are marked ``# doctest: +SKIP`` where they cannot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DOCTEST_PATHS = ["tfthroughput"]  # every module: examples run, or say why they cannot


def test_docstring_examples_run():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--doctest-modules", "-p", "no:cacheprovider", "-q"]
        + DOCTEST_PATHS,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) >= 10, result.stdout[-2000:]
