"""A Griffe extension for the API reference: docstrings read as the source means them.

- Each docstring's summary on one line. mkdocstrings' summary tables (a class's attributes
  and methods, on the pages of docs/api/) describe each member by the first *line* of its
  docstring, so a summary that wraps in the source was cut mid-sentence there ("Windows ended
  so far in the fit in progress (one per epoch without"). Joining the first paragraph's lines
  changes nothing else: a newline inside a Markdown paragraph renders as a space.
- ``Example:`` read as Google style's examples section, as ``Examples:`` is. Griffe reads the
  singular as an admonition of Markdown, where ``>>>`` is three nested quotes and ``# ...`` a
  heading: each example rendered as one quoted paragraph, its comments as headings in the
  table of contents. The suite's ``# doctest: +SKIP`` directives are left out of the page.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# A first paragraph whose later lines start so is a list, a table or an example, not prose.
_STRUCTURE = ("- ", "* ", "|", ">>>", "```")
_EXAMPLE_HEADER = re.compile(r"^Example:[ \t]*$", re.M)
# The suite's doctest directives: for the test run, not for the reader.
_DOCTEST_DIRECTIVE = re.compile(r"[ \t]*# doctest: [+-][A-Z_]+(?:, *[+-][A-Z_]+)*")


def one_line_summary(text: str) -> str:
    """``text`` with the lines of its first paragraph joined by spaces.

    Example:
        >>> one_line_summary("Counts the windows\\nof a fit.\\n\\nArgs:\\n    x: y.")
        'Counts the windows of a fit.\\n\\nArgs:\\n    x: y.'
    """
    first, separator, rest = text.partition("\n\n")
    lines = first.splitlines()
    if len(lines) < 2 or any(line.lstrip().startswith(_STRUCTURE) for line in lines[1:]):
        return text
    return " ".join(line.strip() for line in lines) + separator + rest


def readable(text: str) -> str:
    """``text`` with its summary on one line, ``Example:`` read as ``Examples:``, and no
    doctest directive.

    Example:
        >>> readable("Time it.\\n\\nExample:\\n    >>> f()  # doctest: +SKIP\\n    2")
        'Time it.\\n\\nExamples:\\n    >>> f()\\n    2'
    """
    text = _EXAMPLE_HEADER.sub("Examples:", one_line_summary(text))
    return _DOCTEST_DIRECTIVE.sub("", text)


class OneLineSummaries(griffe.Extension):
    """Makes every docstring :func:`readable` (see the module)."""

    def on_object(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = readable(obj.docstring.value)
