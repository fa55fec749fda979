"""``MLflowSink``: the monitor's figures as MLflow metrics, sent off the training thread.

Each window's and each epoch's scalars become MLflow metrics at ``step`` = the global training
step (optimizer steps completed), named ``<kind>/<tag with "." for "/">``: the TensorBoard tag
``window/gpu0/utilization_percent/mean`` becomes ``window/gpu0.utilization_percent.mean``, the
epoch's ``gpu0/utilization_percent/mean`` becomes ``epoch/gpu0.utilization_percent.mean`` and
``epoch/examples_per_second`` stays as it is. One ``/`` per name: MLflow's UI groups a run's
charts by the part before it (an ``epoch`` and a ``window`` section), and no name is a prefix
folder of another (``gpu0/energy_joules`` beside ``gpu0/energy_joules/from_counter`` would be
a file and a folder of one name where a store keeps metrics as files). ``mlflow.keras.autolog``
logs ``loss``, ``val_loss``, ... without ``/`` and MLflow's system metrics ``system/...``: no
name is shared.

Sending: ``write`` only appends to a queue; a daemon thread sends it with ``log_batch`` (at most
1000 metrics a call, MLflow's limit) every ``flush_interval`` seconds. A failed call (server
unreachable, or slower than MLflow's own timeout and retries allow) is warned about once; from
then on what is queued is dropped, never retried, so the queue cannot grow and nothing waits.
When the ``fit`` ends, the sink waits at most ``close_timeout`` seconds for what is left, then
drops it (counted in :attr:`MLflowSink.dropped_metrics`, logged on the ``tfthroughput``
logger).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import warnings
from collections import deque

from tfthroughput._validation import check_bool
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.sinks._extras import install_hint, missing, require
from tfthroughput.sinks.sink import Measurement, RunInfo, Sink

_logger = logging.getLogger("tfthroughput")
MAX_METRICS_PER_CALL = 1000  # MLflow's limit for one log_batch


def mlflow_metric_name(kind: str, tag: str, task: str | None = None) -> str:
    """The MLflow name of a TensorBoard tag written for a window or an epoch.

    Args:
        kind: ``"window"`` or ``"epoch"``.
        tag: The TensorBoard tag (``window/gpu0/utilization_percent/mean``,
            ``gpu0/utilization_percent/mean``, ``epoch/seconds``).
        task: ``worker_1`` etc. on a MultiWorkerMirroredStrategy worker, put before the rest so
            workers logging into one run do not collide.

    Returns:
        ``<kind>/[<task>.]<rest of the tag with "." for "/">``.

    Example:
        >>> mlflow_metric_name("window", "window/gpu0/utilization_percent/mean")
        'window/gpu0.utilization_percent.mean'
        >>> mlflow_metric_name("epoch", "epoch/examples_per_second", task="worker_1")
        'epoch/worker_1.examples_per_second'
    """
    rest = tag.removeprefix(f"{kind}/").replace("/", ".")
    return f"{kind}/{task}.{rest}" if task else f"{kind}/{rest}"


class MLflowSink(Sink):
    """Logs the monitor's figures to an MLflow run, from a thread of its own.

    The run is ``run_id`` if given, else the active run when ``fit`` starts (one
    ``mlflow.start_run()`` or ``mlflow.keras.autolog`` opened), else, with ``start_run=True``,
    a run the sink starts and ends with the ``fit``.

    Args:
        run_id: The MLflow run to log into. Defaults to None (the active run).
        start_run: Start a run (``mlflow.start_run()``: MLflow's tracking URI and experiment)
            when none is active, and end it when the ``fit`` ends. Defaults to False: no
            active run is an error.
        tracking_uri: The tracking server or store of ``run_id``. Defaults to None (MLflow's
            own setting: ``mlflow.set_tracking_uri`` or ``MLFLOW_TRACKING_URI``).
        flush_interval: Seconds between two sends. Defaults to 1.0.
        close_timeout: Seconds the end of ``fit`` waits at most for unsent metrics. Defaults
            to 10.0.

    Raises:
        TypeError, ValueError: For invalid arguments, naming the argument and value.

    Example:
        >>> import mlflow  # doctest: +SKIP
        >>> with mlflow.start_run():  # doctest: +SKIP
        ...     model.fit(data, callbacks=[GPUMonitor(sinks=[MLflowSink()])])
    """

    def __init__(
        self,
        run_id: str | None = None,
        *,
        start_run: bool = False,
        tracking_uri: str | None = None,
        flush_interval: float = 1.0,
        close_timeout: float = 10.0,
    ) -> None:
        if run_id is not None and not (isinstance(run_id, str) and run_id):
            raise TypeError(
                f"`run_id` must be an MLflow run id (a string). Received: run_id={run_id!r}"
            )
        if tracking_uri is not None and not isinstance(tracking_uri, str):
            raise TypeError(
                f"`tracking_uri` must be a string. Received: tracking_uri={tracking_uri!r}"
            )
        if missing("mlflow"):  # the hint when the sink is made, not when fit starts
            raise install_hint("mlflow")
        self.run_id = run_id
        self.start_run = check_bool("start_run", start_run)
        if start_run and tracking_uri is not None:
            raise ValueError(
                "`start_run=True` starts the run where MLflow's own setting points "
                "(`mlflow.set_tracking_uri` or MLFLOW_TRACKING_URI), so it takes no "
                f"`tracking_uri`. Received: start_run=True, tracking_uri={tracking_uri!r}"
            )
        self.tracking_uri = tracking_uri
        self.flush_interval = _positive_seconds("flush_interval", flush_interval)
        self.close_timeout = _positive_seconds("close_timeout", close_timeout, allow_zero=True)
        self.dropped_metrics = 0
        self._reset()

    def _reset(self) -> None:
        self._queue: deque = deque()
        self._lock: threading.Lock | None = None
        self._wake: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._client = None
        self._active_run_id: str | None = None
        self._started_run = False
        self._task: str | None = None
        self._failed = False
        self._warned = False

    # Sink ----------------------------------------------------------------------------------

    def open(self, run: RunInfo) -> None:
        mlflow = require("mlflow")
        self._reset()
        self.dropped_metrics = 0
        self._task = run.task
        active = mlflow.active_run()
        if self.run_id is not None:
            self._active_run_id = self.run_id
        elif active is not None:
            self._active_run_id = active.info.run_id
        elif self.start_run:
            self._active_run_id = mlflow.start_run().info.run_id
            self._started_run = True
        else:
            raise ValueError(
                "MLflowSink found no active MLflow run: call `mlflow.start_run()` before `fit`, "
                "pass `run_id=`, or `start_run=True` to have the sink start one. Received: "
                "run_id=None, start_run=False"
            )
        # Made once the run is known: a client for a local store would create it.
        self._client = mlflow.MlflowClient(tracking_uri=self.tracking_uri)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=self._send_loop, name="tfthroughput-mlflow", daemon=True
        )
        self._thread.start()

    def write(self, measurement: Measurement) -> None:
        if self._lock is None:
            return
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        metrics = [
            Metric(
                mlflow_metric_name(measurement.kind, tag, self._task),
                float(value),
                timestamp,
                measurement.step,
            )
            for tag, value in measurement.scalars.items()
        ]
        with self._lock:
            if self._failed:
                self.dropped_metrics += len(metrics)
            else:
                self._queue.extend(metrics)

    def close(self) -> None:
        thread, wake = self._thread, self._wake
        if thread is None or wake is None:
            return
        self._thread = None
        wake.set()  # the loop sends what is left, then ends
        thread.join(self.close_timeout)
        with self._lock:
            left = len(self._queue)
            self._queue.clear()
            self._failed = True  # a call still in flight drops its batch when it returns
        if thread.is_alive() and left:
            self.dropped_metrics += left
            self._warn_once(
                f"the tracking server took longer than close_timeout={self.close_timeout} s; "
                f"{left} metrics not sent"
            )
        if self.dropped_metrics:
            _logger.warning(
                "MLflowSink dropped %d metrics of run %s (sent: the rest).",
                self.dropped_metrics,
                self._active_run_id,
            )
        if self._started_run:
            self._end_started_run()

    # Internals -----------------------------------------------------------------------------

    def _send_loop(self) -> None:
        wake = self._wake
        while True:
            stopping = wake.wait(self.flush_interval)
            self._send_queued()
            if stopping:
                return

    def _send_queued(self) -> None:
        while True:
            with self._lock:
                if self._failed or not self._queue:
                    return
                batch = [
                    self._queue.popleft()
                    for _ in range(min(len(self._queue), MAX_METRICS_PER_CALL))
                ]
            try:
                self._client.log_batch(self._active_run_id, metrics=batch)
            except Exception as error:  # noqa: BLE001 - the server's fault must not stop training
                with self._lock:
                    self._failed = True
                    self.dropped_metrics += len(batch) + len(self._queue)
                    self._queue.clear()
                self._warn_once(f"{type(error).__name__}: {_first_line(error)}")
                return

    def _warn_once(self, reason: str) -> None:
        if self._warned:
            return
        self._warned = True
        warnings.warn(
            f"MLflowSink could not log to run {self._active_run_id} ({reason}). Training goes "
            "on; the monitor's metrics for MLflow are dropped from here on (TensorBoard's event "
            "files still hold them). Warned once.",
            MonitoringWarning,
            stacklevel=2,
        )

    def _end_started_run(self) -> None:
        mlflow = require("mlflow")
        active = mlflow.active_run()
        try:
            if active is not None and active.info.run_id == self._active_run_id:
                mlflow.end_run()
            else:
                self._client.set_terminated(self._active_run_id)
        except Exception as error:  # noqa: BLE001
            self._warn_once(f"ending the run: {type(error).__name__}: {_first_line(error)}")

    def __deepcopy__(self, memo) -> MLflowSink:
        clone = MLflowSink(
            self.run_id,
            start_run=self.start_run,
            tracking_uri=self.tracking_uri,
            flush_interval=self.flush_interval,
            close_timeout=self.close_timeout,
        )
        memo[id(self)] = clone
        return clone


def log_report(report: object, *, run_id: str | None = None, name: str | None = None) -> str:
    """Attach a ``diagnose`` or ``tune`` result to an MLflow run as a Markdown artifact.

    Args:
        report: The result: its ``to_markdown()`` is logged where it has one, else ``str()``.
        run_id: The run. Defaults to None (the active run).
        name: The artifact's file name. Defaults to ``tfthroughput/<type name>.md``.

    Returns:
        The artifact path inside the run.

    Raises:
        ImportError: If MLflow is not installed.
        ValueError: If no run is given and none is active.

    Example:
        >>> log_report(tfthroughput.diagnose(model, dataset))  # doctest: +SKIP
        'tfthroughput/DiagnosisReport.md'
    """
    mlflow = require("mlflow")
    if run_id is None:
        active = mlflow.active_run()
        if active is None:
            raise ValueError(
                "log_report found no active MLflow run: call it inside `mlflow.start_run()` "
                "or pass `run_id=`. Received: run_id=None"
            )
        run_id = active.info.run_id
    to_markdown = getattr(report, "to_markdown", None)
    text = to_markdown() if callable(to_markdown) else str(report)
    name = name or f"tfthroughput/{type(report).__name__}.md"
    mlflow.MlflowClient().log_text(run_id, text, name)
    return name


def _positive_seconds(argument: str, value: object, *, allow_zero: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (value >= 0 if allow_zero else value > 0)
        or value != value
    ):
        expected = "a non-negative" if allow_zero else "a positive"
        raise ValueError(
            f"`{argument}` must be {expected} number of seconds. Received: {argument}={value!r}"
        )
    return float(value)


def _first_line(error: BaseException) -> str:
    return re.split(r"\n", str(error).strip(), maxsplit=1)[0][:300]
