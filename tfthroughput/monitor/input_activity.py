"""A source that tells whether the input pipeline is running Python code right now.

``tf.py_function``, ``tf.numpy_function`` and ``tf.data.Dataset.from_generator`` run Python on
tf.data's threads, through TensorFlow's ``script_ops`` module. Such code is invisible to the
hardware counters when it waits (on a file, a network read, a lock, a ``sleep``) rather than
computes, yet it is a common reason one worker of a cluster holds the others back. Read by the
sampler at every interval, this source gives ``python_percent`` = 100 when some thread other
than the sampler is inside such a function and 0 otherwise, so its epoch mean is the share of
the epoch during which the input was busy in Python.

The check walks each thread's current Python stack (``sys._current_frames()``, tens of
microseconds) and keeps no frame once it returns. It imports no TensorFlow.
"""

from __future__ import annotations

import os
import sys
import threading
from types import FrameType

SOURCE_NAME = "input"
METRIC_NAME = "python_percent"
# TensorFlow runs every py_function, numpy_function and from_generator callback from here.
_SCRIPT_OPS = os.path.join("tensorflow", "python", "ops", "script_ops.py")
_MAX_DEPTH = 64


class InputActivitySource:
    """Reads whether a Python input function (``tf.py_function``, ...) is running.

    Example:
        >>> InputActivitySource().read()  # nothing of the sort running here
        {'python_percent': 0.0}
    """

    name = SOURCE_NAME

    def read(self) -> dict[str, float]:
        sampler_thread = threading.get_ident()
        frames = sys._current_frames()
        try:
            busy = any(
                _inside_script_ops(frame)
                for thread, frame in frames.items()
                if thread != sampler_thread
            )
        finally:
            frames.clear()  # hold no thread's frames past this read
        return {METRIC_NAME: 100.0 if busy else 0.0}

    def close(self) -> None:
        """Nothing to release."""


def _inside_script_ops(frame) -> bool:
    for _ in range(_MAX_DEPTH):
        if not isinstance(frame, FrameType):  # a link read mid-change: see FitCall.is_running
            return False
        if frame.f_code.co_filename.endswith(_SCRIPT_OPS):
            return True
        frame = frame.f_back
    return False
