"""Make TensorFlow impossible to import, as on a machine that does not have it.

Importing this module installs the blocker, so it works both as a pytest plugin
(``python -m pytest -p without_tensorflow ...``, loaded before any test module) and as the first
import of a child script. ``import tensorflow`` then raises ``ModuleNotFoundError`` exactly as
it does when the package is missing, so code that handles a missing TensorFlow sees what a
user without it would.
"""

from __future__ import annotations

import sys

BLOCKED = "tensorflow"


class RefuseTensorFlow:
    """A ``sys.meta_path`` finder that refuses ``tensorflow`` and its submodules."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if BLOCKED in sys.modules:
    raise RuntimeError("TensorFlow was imported before it could be blocked")
if not any(isinstance(finder, RefuseTensorFlow) for finder in sys.meta_path):
    sys.meta_path.insert(0, RefuseTensorFlow())


def pytest_terminal_summary(terminalreporter):
    """As a pytest plugin: say which Keras backend the tests ran on, that TensorFlow was never
    imported, and which test files had passing tests, so a caller can check that the run was
    the one it asked for."""
    import keras

    files = sorted({report.nodeid.split("::")[0] for report in terminalreporter.stats["passed"]})
    terminalreporter.write_line(
        f"keras backend: {keras.config.backend()}; "
        f"tensorflow imported: {BLOCKED in sys.modules}; "
        f"files with passing tests: {' '.join(name.rsplit('/', 1)[-1] for name in files)}"
    )
