"""Tables of the docs, parsed, so tests can hold them to the code: the logged tags
(docs/tags.md) and what needs TensorFlow (the README)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
DOCS = Path(__file__).resolve().parents[1] / "docs"
TAGS_PAGE = DOCS / "tags.md"


def logged_tags_table() -> list[tuple[str, str, str]]:
    """``(tag, unit, meaning)`` rows of docs/tags.md's first table, tags still quoted."""
    section = TAGS_PAGE.read_text()
    rows = []
    for line in section.splitlines():
        if rows and not line.startswith("|"):
            break  # the table has ended
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def backend_table() -> list[tuple[list[str], str]]:
    """``(names, without_tensorflow)`` rows of the table under "### Keras on JAX or PyTorch, and
    no TensorFlow": the backquoted names of the first column (calls such as
    ``recommend_precision()`` kept as written) and the third column."""
    section = README.read_text().split("### Keras on JAX or PyTorch, and no TensorFlow", 1)[1]
    rows = []
    for line in section.splitlines():
        if rows and not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[2]))
    return rows
