"""The README's "Logged tags" table, parsed, so tests can hold it to the code."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def logged_tags_table() -> list[tuple[str, str, str]]:
    """``(tag, unit, meaning)`` rows of the table under "### Logged tags", tags still quoted."""
    section = README.read_text().split("### Logged tags", 1)[1]
    rows = []
    for line in section.splitlines():
        if rows and not line.startswith("|"):
            break  # the table has ended
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0], cells[1], cells[2]))
    return rows
