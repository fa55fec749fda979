"""Size limits that keep the package easy to change: no function over 80 lines (the whole
``def``, decorators, signature and docstring included) and no module over 350 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tfthroughput"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 350


def function_lengths(source: str, relative: str) -> dict[str, int]:
    """``{"<relative>:<function>": lines}`` for every function and method in ``source``."""
    lengths = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
            lengths[f"{relative}:{node.name}"] = node.end_lineno - start + 1
    return lengths


def test_no_function_is_over_80_lines():
    too_long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for name, lines in function_lengths(path.read_text(), relative).items():
            if lines > MAX_FUNCTION_LINES:
                too_long[name] = lines
    assert too_long == {}, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"


def test_no_module_is_over_350_lines():
    too_long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            too_long[relative] = lines
    assert too_long == {}, f"modules over {MAX_MODULE_LINES} lines: {too_long}"


def test_the_measure_counts_decorators_signature_docstring_and_nested_functions():
    source = (
        "@decorator\n"
        "def outer(\n"
        "    a,\n"
        "):\n"
        '    """Doc.\n'
        "\n"
        "    More.\n"
        '    """\n'
        "    def inner():\n"
        "        return a\n"
        "    return inner\n"
    )
    assert function_lengths(source, "m.py") == {"m.py:outer": 11, "m.py:inner": 2}
