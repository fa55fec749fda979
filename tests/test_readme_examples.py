"""The README's Python examples run as written, and print what the README says they print.

Every ```python block runs in a fresh interpreter in an empty folder, unless its fence says
```python fragment (a piece that needs the reader's own model or data). Where the README shows
the output right after a block ("prints ...:", "ends with ...:", "printed, it reads:"), each
shown line must appear in the output, in order, with any number standing for any number and
runs of spaces for any spacing; a "..." line stands for lines left out.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\S*)(?: (\S+))?\n(.*?)^```\n", re.M | re.S)
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _examples() -> list[tuple[int, str, list[str] | None]]:
    """``(line, code, shown output or None)`` for each runnable Python block."""
    text = README.read_text()
    fences = list(FENCE.finditer(text))
    examples = []
    for index, fence in enumerate(fences):
        language, marker, code = fence.groups()
        if language != "python" or marker == "fragment":
            continue
        shown = None
        following = fences[index + 1] if index + 1 < len(fences) else None
        if following is not None and following.group(1) in ("", "text"):
            between = text[fence.end() : following.start()].strip()
            if between.endswith(":") and len(between) < 300:
                shown = following.group(3).splitlines()
        examples.append((text.count("\n", 0, fence.start()) + 1, code, shown))
    return examples


def _pattern(line: str) -> re.Pattern:
    """A shown line with every number standing for any number, every spacing for any."""
    parts = NUMBER.split(" ".join(line.split()))
    return re.compile(r"[\d,]+(?:\.\d+)?".join(re.escape(part) for part in parts))


def _missing(shown: list[str], output: list[str]) -> list[str]:
    """The shown lines not found in ``output`` in their order ("..." skips any lines)."""
    normalized = [" ".join(line.split()) for line in output]
    position, missing = 0, []
    for line in shown:
        if not line.strip() or line.strip() == "...":
            continue
        pattern = _pattern(line)
        found = next(
            (i for i in range(position, len(normalized)) if pattern.fullmatch(normalized[i])),
            None,
        )
        if found is None:
            missing.append(line)
        else:
            position = found + 1
    return missing


EXAMPLES = _examples()


def test_the_readme_has_runnable_examples_with_shown_output():
    assert len(EXAMPLES) >= 8
    assert sum(shown is not None for _, _, shown in EXAMPLES) >= 4


def test_a_shown_line_must_match_in_order():
    output = ["pipeline: a -> b", "3 finding(s):", "took 1,234.5 ms", "end"]
    assert _missing(["3 finding(s):", "...", "took 9 ms"], output) == []
    assert _missing(["took 9 ms", "3 finding(s):"], output) == ["3 finding(s):"]
    assert _missing(["took 9 s"], output) == ["took 9 s"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "shown"),
    [pytest.param(code, shown, id=f"README.md:{line}") for line, code, shown in EXAMPLES],
)
def test_the_example_runs_and_prints_what_the_readme_shows(code, shown, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("TF_CPP_")}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    if shown is not None:
        assert _missing(shown, result.stdout.splitlines()) == [], result.stdout
