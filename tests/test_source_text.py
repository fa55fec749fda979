"""What the package's and the benchmarks' source says: what the code does and why, never which
issue asked for it (the issue tracker and the commit log keep that; a reader of the code cannot
open either)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# "issue 17", "issues 12 and 14", "issue #3"; another project's issue is cited by its address
# (github.com/.../issues/N) or as owner/repo#N, which this leaves alone.
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


def test_no_module_names_an_issue_by_its_number():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("tfthroughput", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ISSUE_NUMBER.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_pattern_finds_an_issue_number_and_leaves_an_address_alone():
    assert ISSUE_NUMBER.search("the 32-64-1 MLP of issue 17")
    assert ISSUE_NUMBER.search("Issues #12")
    assert not ISSUE_NUMBER.search("keras-team/keras#23179")
    assert not ISSUE_NUMBER.search("github.com/tensorflow/tensorflow/issues/45114")
