"""The whole tree stays lint-clean and formatted: the package, tests, benchmarks, the docs' hooks,
the notebook and the Python blocks of the Markdown pages (ruff, configured in pyproject.toml and
pinned in setup.cfg: a newer ruff may format differently).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["."]


def test_ruff_check_passes():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", *PATHS], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_applied():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
