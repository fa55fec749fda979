"""MkDocs hook: the fence markers the test suite reads are not languages.

```python fragment (a piece that needs the reader's own model or data, not run by the suite) and
```python no-tensorflow (run by the suite with TensorFlow made impossible to import) render as
plain Python.
"""

from __future__ import annotations

import re

_MARKED_FENCE = re.compile(r"^(\s*```python) (?:fragment|no-tensorflow)\s*$", re.M)


def on_page_markdown(markdown, **kwargs):
    """Drop the suite's markers from Python fences before the page is rendered."""
    return _MARKED_FENCE.sub(r"\1", markdown)
