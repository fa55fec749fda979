"""``input/wait_percent``: the share of a phase's wall time in which the loop waited for its
next batch, from the running total of seconds waited that the input's count keeps.

How the total is kept depends on the backend (see ``docs/tags.md``); this module only turns
two readings of it into a share of the time between them. Under Keras's TensorFlow backend the
counted pipeline of :mod:`tfthroughput.monitor.graph_count` times, inside the step's own
``get_next``, how long the step was blocked in the user's pipeline; Keras waits for each step's
results there, so a wait of the host is time the device had nothing of this ``fit`` to run.

A reading that fails, or a count that keeps no wait, gives no figure: the tag is left out,
never guessed, and training goes on. Where a kind of input or a setup cannot be measured, one
line on the ``tfthroughput`` logger says so, once per process for each reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

_logger = logging.getLogger("tfthroughput")

# The tag (`input/wait_percent`; `window/input/wait_percent`, `validation/...`) and `logs` key.
SOURCE = "input"
METRIC = "wait_percent"
TAG = f"{SOURCE}/{METRIC}"
LOGS_KEY = f"{SOURCE}_{METRIC}"


def wait_percent(waited: float, seconds: float) -> float | None:
    """``waited`` seconds as a share of ``seconds``, in percent, within 0-100; ``None`` for a
    span of no time.

    Example:
        >>> wait_percent(0.62, 1.0)
        62.0
    """
    if seconds <= 0:
        return None
    return min(100.0, max(0.0, 100.0 * waited / seconds))


class PhaseWait:
    """Readings of the seconds waited at the start of a phase and of its open window. Not
    thread-safe: the run holds its lock.

    Args:
        waited: Reads the seconds waited so far (``GraphCount.waited``), or ``None`` where no
            wait is kept: then every share is ``None``.

    Example:
        >>> total = iter([0.0, 0.5, 1.5])
        >>> wait = PhaseWait(lambda: next(total))
        >>> wait.begin()
        >>> wait.window(1.0), wait.phase(2.0)
        (50.0, 75.0)
    """

    def __init__(self, waited: Callable[[], float | None] | None) -> None:
        self._waited = waited
        self._phase: float | None = None
        self._window: float | None = None

    def begin(self) -> None:
        """A phase (and its first window) begins now."""
        self._phase = self._window = self._read()

    def window(self, seconds: float) -> float | None:
        """The share of the window that ends now, ``seconds`` long; the next one begins."""
        now = self._read()
        start, self._window = self._window, now
        return _share(start, now, seconds)

    def phase(self, seconds: float | None) -> float | None:
        """The share of the phase so far, ``seconds`` long (no new reading is kept: a window
        ended at the same moment reads the same total)."""
        if seconds is None:
            return None
        return _share(self._phase, self._read(), seconds)

    def _read(self) -> float | None:
        if self._waited is None:
            return None
        try:
            return self._waited()
        except Exception:  # noqa: BLE001 - a wait that cannot be read leaves the figure out
            return None


def _share(start: float | None, end: float | None, seconds: float) -> float | None:
    if start is None or end is None or end < start:
        return None
    return wait_percent(end - start, seconds)


_said: set[str] = set()


def waited_reader(
    count: object | None, phase: str, multi_worker: bool
) -> Callable[[], float | None] | None:
    """What reads the seconds waited for ``phase``'s batches (``"fit"``, ``"validation"``,
    ``"evaluate"``, ``"predict"``) from its input's count, or ``None`` (said once) where the
    wait is not measured."""
    if multi_worker:
        reason = "each worker's input is distributed by MultiWorkerMirroredStrategy"
    elif count is None:
        reason = "its input could not be followed (no Keras call, or a dataset it cannot count)"
    elif getattr(count, "untimed_reason", None):
        reason = count.untimed_reason
    elif not getattr(count, "timed", True):
        reason = "the tf.distribute strategy prefetches batches onto its devices ahead of the step"
    else:
        return count.waited
    say_unmeasured(phase, reason)
    return None


def say_unmeasured(phase: str, reason: str) -> None:
    """One line on the ``tfthroughput`` logger, once per process for each phase and reason."""
    key = f"{phase}: {reason}"
    if key in _said:
        return
    _said.add(key)
    _logger.warning("GPUMonitor: no %s for %s: %s.", TAG, phase, reason)
