"""Docstring examples run as written, or are marked ``# doctest: +SKIP`` where they cannot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Files and folders whose docstring examples are checked.
DOCTEST_PATHS = [
    "tfthroughput/_optional.py",
    "tfthroughput/_startup.py",
    "tfthroughput/_validation.py",
    "tfthroughput/cli.py",
    "tfthroughput/demo.py",
    "tfthroughput/precision",
    "tfthroughput/hardware",
    "tfthroughput/monitor/windows.py",
    "tfthroughput/monitor/dip.py",
    "tfthroughput/diagnosis/measure.py",
    "tfthroughput/diagnosis/report.py",
    "tfthroughput/diagnosis/verdict.py",
    "tfthroughput/data/description.py",
    "tfthroughput/data/dispatcher.py",
    "tfthroughput/data/service.py",
    "tfthroughput/data/service_cluster.py",
    "tfthroughput/data/lint.py",
    "tfthroughput/data/autotune.py",
]


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
