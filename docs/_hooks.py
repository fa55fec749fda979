"""MkDocs hooks: the suite's fence markers, and the API reference made from the faces.

- ```python fragment (a piece that needs the reader's own model or data, not run by the suite)
  and ```python no-tensorflow (run by the suite with TensorFlow made impossible to import)
  render as plain Python.
- A line ``::: face tfthroughput.data`` becomes one mkdocstrings entry per public name of that
  face (its ``_EXPORTS``, read from the source without importing it), so the reference lists
  exactly what each ``__all__`` exports, in the same order. A class built on a base from a
  private module (``tuning/_result_base.py``) lists that base's members as its own.
- A line ``::: names tfthroughput`` becomes a table of the package's top-level names, each
  linked to its entry and described by its docstring's summary (its first paragraph).
- The docstrings' Sphinx roles (:func:`x`, :class:`x`, ...) show as code, without the role.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

# Trailing blanks are matched with [ \t]*, never \s*: \s* also eats the newlines of the blank
# lines after the marker, and a table that runs into the next line swallows that paragraph.
_MARKED_FENCE = re.compile(r"^([ \t]*```python) (?:fragment|no-tensorflow)[ \t]*$", re.M)
_FACE_LINE = re.compile(r"^::: face (tfthroughput(?:\.\w+)*)[ \t]*$", re.M)
_NAMES_LINE = re.compile(r"^::: names (tfthroughput(?:\.\w+)*)[ \t]*$", re.M)
_ROOT = Path(__file__).resolve().parents[1]
_ROLE_IN_HTML = re.compile(r":(?:func|class|meth|mod|data|attr|obj|exc):<code>~?")
_ROLE_IN_TEXT = re.compile(r":(?:func|class|meth|mod|data|attr|obj|exc):`~?([^`]+)`")


def face_exports(face: str) -> dict[str, str]:
    """``{public name: defining module}`` of a face, from its ``_EXPORTS`` dict literal."""
    path = _ROOT.joinpath(*face.split("."), "__init__.py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(getattr(target, "id", None) == "_EXPORTS" for target in targets):
                return ast.literal_eval(node.value)
    raise ValueError(f"{path} has no _EXPORTS dict")


def summary_line(module: str, name: str) -> str:
    """The summary of ``name``'s docstring in ``module``, read from the source: its first
    paragraph (Google style), which may wrap over several lines, joined into one."""
    path = _ROOT.joinpath(*module.split(".")).with_suffix(".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
            paragraph = (ast.get_docstring(node) or "").strip().split("\n\n")[0]
            summary = _ROLE_IN_TEXT.sub(r"`\1`", " ".join(paragraph.split()))
            return summary.replace("|", r"\|")  # a bar would end the table cell
    raise ValueError(f"{module} defines no {name}")


def _names_table(match: re.Match) -> str:
    exports = face_exports(match.group(1))
    rows = ["| name | what it is |", "| --- | --- |"]
    for name in sorted(exports, key=str.lower):
        target = f"{exports[name]}.{name}"
        rows.append(f"| [`{name}`][{target}] | {summary_line(exports[name], name)} |")
    return "\n".join(rows)


def _private_bases(module: str, name: str) -> bool:
    """Whether class ``name`` of ``module`` has a base imported from a private module."""
    tree = ast.parse(_ROOT.joinpath(*module.split(".")).with_suffix(".py").read_text())
    private = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1][:1] == "_"
        for alias in node.names
    }
    return any(
        isinstance(node, ast.ClassDef)
        and node.name == name
        and any(getattr(base, "id", None) in private for base in node.bases)
        for node in tree.body
    )


def _entry(module: str, name: str) -> str:
    if not _private_bases(module, name):
        return f"::: {module}.{name}"
    return f"::: {module}.{name}\n    options:\n      inherited_members: true"


def _expand_face(match: re.Match) -> str:
    exports = face_exports(match.group(1))
    return "\n\n".join(_entry(exports[name], name) for name in sorted(exports))


def on_page_markdown(markdown, **kwargs):
    """Drop the suite's fence markers and expand ``::: face`` and ``::: names`` lines."""
    markdown = _MARKED_FENCE.sub(r"\1", markdown)
    return _NAMES_LINE.sub(_names_table, _FACE_LINE.sub(_expand_face, markdown))


def on_page_content(html, **kwargs):
    """Render the docstrings' Sphinx roles as the plain code they name."""
    return _ROLE_IN_HTML.sub("<code>", html)
