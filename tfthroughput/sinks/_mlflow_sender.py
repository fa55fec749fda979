"""One ``fit``'s MLflow metrics, sent to one run from a daemon thread of their own.

The end of ``fit`` does not wait for the last send: a ``log_batch`` to a tracking server takes
tens of milliseconds (about 20 ms to a server on loopback with a SQLite store), all of it
waiting on the server, and the training loop should not. The thread sends what is left and
ends by itself; :func:`finish_at_exit` waits for the senders still at work when the interpreter
exits (each at most its ``close_timeout``), so a script that ends right after ``fit`` still
delivers its last epoch.
"""

from __future__ import annotations

import atexit
import logging
import threading
import warnings
from collections import deque

from tfthroughput.hardware.source import MonitoringWarning

_logger = logging.getLogger("tfthroughput")
MAX_METRICS_PER_CALL = 1000  # MLflow's limit for one log_batch

# Senders whose fit has ended and whose thread may still be sending.
_finishing: set[MetricSender] = set()
_finishing_lock = threading.Lock()


class MetricSender:
    """Queues metrics and sends them with ``log_batch`` every ``flush_interval`` seconds.

    A failed call is warned about once; from then on what is queued is dropped, never retried,
    so the queue cannot grow and nothing waits.

    Args:
        client: An ``mlflow.MlflowClient``.
        run_id: The run to log into.
        flush_interval: Seconds between two sends.
        close_timeout: Seconds :meth:`wait` (and the interpreter's exit) waits at most for
            the last send once the fit has ended.
    """

    def __init__(
        self,
        client,
        run_id: str,
        *,
        flush_interval: float,
        close_timeout: float,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.close_timeout = close_timeout
        self.dropped = 0
        self._in_flight = 0  # metrics of the log_batch call under way
        self._flush_interval = flush_interval
        self._queue: deque = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._failed = False
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="tfthroughput-mlflow", daemon=True)
        self._thread.start()

    def add(self, metrics: list) -> None:
        with self._lock:
            if self._failed or self._wake.is_set():  # failed, or the fit has ended: never sent
                self.dropped += len(metrics)
            else:
                self._queue.extend(metrics)

    def finish(self) -> None:
        """The fit has ended: send what is left at once and end; does not wait."""
        with _finishing_lock:
            _finishing.add(self)
        self._wake.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until everything is sent or dropped; give up what is left after ``timeout``
        seconds (``close_timeout`` when None). Returns whether the thread had ended."""
        limit = self.close_timeout if timeout is None else timeout
        self._thread.join(limit)
        if not self._thread.is_alive():
            return True
        with self._lock:
            # The call under way is counted too: its metrics are not known to be sent. Should
            # it succeed after all, the thread takes them off the count (_settle_call).
            left = len(self._queue) + (0 if self._failed else self._in_flight)
            self._queue.clear()
            self._failed = True
            self.dropped += left
        if left:
            self.warn_once(f"the tracking server took longer than {limit:g} s; {left} not sent")
        return False

    def warn_once(self, reason: str) -> None:
        with self._lock:
            if self._warned:
                return
            self._warned = True
        warnings.warn(
            f"MLflowSink could not log to run {self.run_id} ({reason}). Training goes "
            "on; the monitor's metrics for MLflow are dropped from here on (TensorBoard's event "
            "files still hold them). Warned once.",
            MonitoringWarning,
            stacklevel=2,
        )

    def _run(self) -> None:
        while True:
            finishing = self._wake.wait(self._flush_interval)
            self._send_queued()
            if finishing:
                break
        if self.dropped:
            _logger.warning(
                "MLflowSink dropped %d metrics of run %s (sent: the rest).",
                self.dropped,
                self.run_id,
            )
        with _finishing_lock:
            _finishing.discard(self)

    def _send_queued(self) -> None:
        while True:
            with self._lock:
                if self._failed or not self._queue:
                    return
                batch = [
                    self._queue.popleft()
                    for _ in range(min(len(self._queue), MAX_METRICS_PER_CALL))
                ]
                self._in_flight = len(batch)
            try:
                self.client.log_batch(self.run_id, metrics=batch)
            except Exception as error:  # noqa: BLE001 - the server's fault must not stop training
                self._settle_call(sent=False)
                self.warn_once(f"{type(error).__name__}: {first_line(error)}")
                return
            self._settle_call(sent=True)

    def _settle_call(self, *, sent: bool) -> None:
        with self._lock:
            abandoned = self._failed  # wait() gave up on this call and counted it dropped
            if sent and abandoned:
                self.dropped -= self._in_flight
            elif not sent and not abandoned:
                self._failed = True
                self.dropped += self._in_flight + len(self._queue)
                self._queue.clear()
            self._in_flight = 0


@atexit.register
def finish_at_exit() -> None:
    """Wait for the senders still at work (each at most its ``close_timeout``)."""
    with _finishing_lock:
        senders = list(_finishing)
    for sender in senders:
        sender.wait()


def first_line(error: BaseException) -> str:
    return str(error).strip().partition("\n")[0][:300]
