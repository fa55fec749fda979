"""The Python examples of the README and of every docs page run as written, and print what the
page says they print.

Every ```python block runs in a fresh interpreter in an empty folder, unless its fence says
```python fragment (a piece that needs the reader's own model or data). A block fenced
```python no-tensorflow runs with TensorFlow impossible to import and no ``KERAS_BACKEND`` set,
as on a machine without TensorFlow. Where the page shows the output right after a block
("prints ...:", "ends with ...:", "printed, it reads:"), each shown line must appear in the
output, in order, with any number standing for any number and runs of spaces for any spacing;
a "..." line stands for lines left out. A block that appears word for word on two pages (the
README's and a docs page's) runs once.

The plain blocks run one after another in one child interpreter (tests/run_blocks.py), each
in its own namespace and empty folder, so TensorFlow is imported once for all of them; a
``no-tensorflow`` block runs alone in a fresh one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = (None, "no-tensorflow")
FENCE = re.compile(r"^```(\S*)(?: (\S+))?\n(.*?)^```\n", re.M | re.S)
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _examples(page: Path) -> list[tuple[int, str, str | None, list[str] | None]]:
    """``(line, code, marker, shown output or None)`` for each runnable Python block."""
    text = page.read_text()
    fences = list(FENCE.finditer(text))
    examples = []
    for index, fence in enumerate(fences):
        language, marker, code = fence.groups()
        if language != "python" or marker not in RUNNABLE:
            continue
        shown = None
        following = fences[index + 1] if index + 1 < len(fences) else None
        if following is not None and following.group(1) in ("", "text"):
            between = text[fence.end() : following.start()].strip()
            if between.endswith(":") and len(between) < 300:
                shown = following.group(3).splitlines()
        examples.append((text.count("\n", 0, fence.start()) + 1, code, marker, shown))
    return examples


def _pattern(line: str) -> re.Pattern:
    """A shown line with every number standing for any number, every spacing for any."""
    parts = NUMBER.split(" ".join(line.split()))
    return re.compile(r"[\d,]+(?:\.\d+)?".join(re.escape(part) for part in parts))


def _missing(shown: list[str], output: list[str]) -> list[str]:
    """The shown lines not found in ``output`` in their order ("..." skips any lines).

    Lines are matched in the output's text flowed into one line, word-aligned: a paragraph
    that the program wraps at other words (a longer number moves a word to the next line)
    still matches, while every word and its order must be as shown.
    """
    flowed = " ".join(" ".join(output).split())
    position, missing = 0, []
    for line in shown:
        if not line.strip() or line.strip() == "...":
            continue
        pattern = re.compile(r"(?<!\S)" + _pattern(line).pattern + r"(?!\S)")
        found = pattern.search(flowed, position)
        if found is None:
            missing.append(line)
        else:
            position = found.end()
    return missing


def _unique_examples() -> list[tuple[str, str, str | None, list[str] | None]]:
    """``(where, code, marker, shown)`` over every page, each block's code once."""
    seen, examples = set(), []
    for page in PAGES:
        for line, code, marker, shown in _examples(page):
            if (code, marker) not in seen:
                seen.add((code, marker))
                examples.append((f"{page.relative_to(ROOT)}:{line}", code, marker, shown))
    return examples


EXAMPLES = _unique_examples()


def test_the_readme_and_the_docs_have_runnable_examples_with_shown_output():
    assert sum(where.startswith("README.md") for where, *_ in EXAMPLES) >= 3
    assert sum(where.startswith("docs/") for where, *_ in EXAMPLES) >= 8
    assert sum(shown is not None for *_, shown in EXAMPLES) >= 6
    assert any(marker == "no-tensorflow" for _, _, marker, _ in EXAMPLES)


def test_a_block_fenced_no_tensorflow_cannot_import_it(tmp_path):
    code = _child_code("import tensorflow", "no-tensorflow")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "No module named 'tensorflow'" in result.stderr


def test_a_shown_line_must_match_in_order():
    output = ["pipeline: a -> b", "3 finding(s):", "took 1,234.5 ms", "end"]
    assert _missing(["3 finding(s):", "...", "took 9 ms"], output) == []
    assert _missing(["took 9 ms", "3 finding(s):"], output) == ["3 finding(s):"]
    assert _missing(["took 9 s"], output) == ["took 9 s"]


def test_a_paragraph_wrapped_at_other_words_still_matches_word_for_word():
    output = [
        "  1. act",
        "     delivers 12.1 batches/s, 84.7x fewer than",
        "     the 1,023.0 batches/s",
    ]
    shown = [
        "  1. act",
        "     delivers 9.1",
        "     batches/s, 54.8x fewer than the 497.8 batches/s",
    ]
    assert _missing(shown, output) == []
    assert _missing(["delivers 9.1 examples/s"], output) == ["delivers 9.1 examples/s"]


def _child_code(code: str, marker: str | None) -> str:
    """The block as the child interpreter runs it: after the TensorFlow blocker if so fenced."""
    if marker != "no-tensorflow":
        return code
    return f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nimport without_tensorflow\n{code}"


def _child_env() -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("TF_CPP_") and key != "KERAS_BACKEND"
    }
    return {**env, "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory) -> dict[str, dict]:
    """Every plain block, run once in one child interpreter: ``{where: result}``."""
    folder = tmp_path_factory.mktemp("blocks")
    blocks = []
    for index, (where, code, marker, _) in enumerate(EXAMPLES):
        if marker is None:
            (folder / str(index)).mkdir()
            blocks.append({"where": where, "code": code, "folder": str(folder / str(index))})
    (folder / "blocks.json").write_text(json.dumps(blocks))
    result = subprocess.run(
        [
            sys.executable,
            str(TESTS / "run_blocks.py"),
            str(folder / "blocks.json"),
            str(folder / "results.json"),  # absolute: each block changes the working folder
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
        env=_child_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((folder / "results.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "code", "marker", "shown"),
    [pytest.param(where, code, marker, shown, id=where) for where, code, marker, shown in EXAMPLES],
)
def test_the_example_runs_and_prints_what_the_page_shows(
    where, code, marker, shown, tmp_path, request
):
    if marker is None:
        result = request.getfixturevalue("shared_run")[where]
        assert result["ok"], result["error"]
        stdout = result["stdout"]
    else:
        child = subprocess.run(
            [sys.executable, "-c", _child_code(code, marker)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=_child_env(),
        )
        assert child.returncode == 0, child.stderr[-3000:]
        stdout = child.stdout
    if shown is not None:
        assert _missing(shown, stdout.splitlines()) == [], stdout
