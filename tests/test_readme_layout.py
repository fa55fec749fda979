"""CONTRIBUTING.md's layout table names every module of the package, each in its own folder."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _layout_table() -> dict[str, set[str]]:
    section = (ROOT / "CONTRIBUTING.md").read_text().split("### Layout", 1)[1]
    table = {}
    for line in section.splitlines()[1:]:
        if table and not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`tfthroughput/"):
            table[cells[0].strip("`")] = set(re.findall(r"`([^`]+)`", cells[2]))
    return table


def test_every_module_is_in_the_layout_table_under_its_folder():
    package = ROOT / "tfthroughput"
    actual = {
        f"{folder.relative_to(ROOT).as_posix()}/": {
            path.stem for path in folder.glob("*.py") if path.name != "__init__.py"
        }
        for folder in [package, *(init.parent for init in package.glob("*/**/__init__.py"))]
    }
    assert _layout_table() == actual


def test_the_top_level_holds_the_faces_and_shared_helpers_only():
    """Everything else lives in a room (the demo in ``demo/``, the command in ``cli/``)."""
    top_level = {path.stem for path in (ROOT / "tfthroughput").glob("*.py")}
    assert top_level == {"__init__", "_lazy", "_optional", "_ratio_text", "_startup", "_validation"}
