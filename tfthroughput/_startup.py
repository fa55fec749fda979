"""Load TensorFlow for the command line without its C++ start-up log.

While TensorFlow's native libraries load and find their devices they log from C++ (the CUDA
stub's search for a driver, the CPU feature guard, oneDNN, plugin registration, ``cuInit`` on a
machine without a driver), much of it before absl logging is initialised, where
``TF_CPP_MIN_LOG_LEVEL`` has no effect. So the only way to keep it off a user's terminal is to
catch file descriptor 2 while TensorFlow starts, drop those log lines, and pass everything else
on (a Python warning or traceback printed meanwhile still shows). Only output is filtered:
nothing that changes what TensorFlow computes (such as ``TF_ENABLE_ONEDNN_OPTS``) is touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# A native log line at INFO, WARNING or ERROR level; FATAL lines are always shown. TensorFlow
# 2.16+ logs through absl ("I0000 00:00:1796003938.030014    9717 cudart_stub.cc:31] ..."),
# older releases through their own logger ("2024-01-31 12:00:00.000000: I tensorflow/...:42] ").
_NATIVE_LOG_LINE = re.compile(
    r"^(?:[IWE]\d{4} [\d:.]+\s+\d+ \S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] \S+:\d+\])"
)
# Start-up lines that are not in that format.
_NOISE_PREFIXES = (
    # absl, each time a library logs before absl::InitializeLog().
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    # The second line of the CPU feature guard's message.
    "To enable the following instructions:",
)


def drop_startup_noise(text: str) -> str:
    """Remove TensorFlow's native start-up log lines from ``text``; keep every other line.

    Args:
        text: What was written to stderr while TensorFlow started.

    Returns:
        ``text`` without the INFO/WARNING/ERROR native log lines and absl's pre-init notice.

    Example:
        >>> drop_startup_noise(
        ...     "I0000 00:00:1796003938.030014    9717 cudart_stub.cc:31] Could not find cuda\\n"
        ...     "UserWarning: something of ours\\n"
        ... )
        'UserWarning: something of ours\\n'
    """
    return "".join(
        line
        for line in text.splitlines(keepends=True)
        if not (_NATIVE_LOG_LINE.match(line) or line.startswith(_NOISE_PREFIXES))
    )


@contextlib.contextmanager
def native_stderr_filtered() -> Iterator[None]:
    """Catch everything written to file descriptor 2 in the block; replay it without the noise.

    Native code writes to the descriptor, not to ``sys.stderr``, so the descriptor itself is
    pointed at a temporary file and restored on exit (also when the block raises). Where the
    descriptor cannot be duplicated (no stderr at all), the block runs unfiltered.
    """
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = drop_startup_noise(capture.read().decode("utf-8", errors="replace"))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def load_tensorflow(*, verbose: bool = False) -> None:
    """Import TensorFlow and Keras and let TensorFlow find its devices.

    Finding the devices is part of start-up: it is where ``cuInit`` runs and logs.

    Args:
        verbose: Defaults to ``False``: drop the native start-up log, and default
            ``TF_CPP_MIN_LOG_LEVEL`` to ``2`` (TensorFlow's INFO and WARNING lines while it
            runs; a value the user set is kept). ``True``: change nothing, show everything.
    """
    if verbose:
        _import_and_find_devices()
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with native_stderr_filtered():
        _import_and_find_devices()


def _import_and_find_devices() -> None:
    import keras  # noqa: F401  (loads its TensorFlow backend, inside the filtered window)
    import tensorflow as tf

    tf.config.list_physical_devices()
