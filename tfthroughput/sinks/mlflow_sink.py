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

Sending (:mod:`tfthroughput.sinks._mlflow_sender`): ``write`` only appends to a queue; a
daemon thread sends it with ``log_batch`` (at most 1000 metrics a call, MLflow's limit) every
``flush_interval`` seconds. A failed call (server unreachable, or slower than MLflow's own
timeout and retries allow) is warned about once; from then on what is queued is dropped, never
retried, so the queue cannot grow and nothing waits. When the ``fit`` ends, the thread sends
what is left and ends by itself: ``fit`` returns without waiting for the server (unless the
sink started the run, which it ends after the last send). :meth:`MLflowSink.wait_until_sent`
waits for it, and so does the interpreter's exit, at most ``close_timeout`` seconds; what is
still unsent then is dropped (counted in :attr:`MLflowSink.dropped_metrics`, logged on the
``tfthroughput`` logger).
"""

from __future__ import annotations

import time

from tfthroughput._validation import check_bool
from tfthroughput.sinks._extras import install_hint, missing, require
from tfthroughput.sinks._mlflow_sender import MetricSender, first_line
from tfthroughput.sinks.sink import Measurement, RunInfo, Sink


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
        flush_interval: Seconds between two sends. Defaults to 5.0: MLflow's client spends
            about 5 ms of CPU on one ``log_batch`` call whatever its size (up to 1000
            metrics), so fewer, fuller calls cost the training process less; 5 s keeps the UI
            at most 5 s behind.
        close_timeout: Seconds :meth:`wait_until_sent`, the interpreter's exit (and the end of
            a ``fit`` whose run the sink started) wait at most for unsent metrics. Defaults
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
        flush_interval: float = 5.0,
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
        self._sender: MetricSender | None = None  # the latest fit's
        self._task: str | None = None
        self._started_run = False

    @property
    def dropped_metrics(self) -> int:
        """Metrics of the latest ``fit`` that could not be sent (final once
        :meth:`wait_until_sent` returned True)."""
        return 0 if self._sender is None else self._sender.dropped

    def wait_until_sent(self, timeout: float | None = None) -> bool:
        """Wait until the latest ``fit``'s metrics are sent (or dropped after a failure), e.g.
        before reading them back with MLflow's client right after ``fit``.

        Args:
            timeout: Seconds to wait at most. Defaults to None: ``close_timeout``. What is
                still unsent then is dropped, with one warning.

        Returns:
            Whether everything was sent or dropped in time.
        """
        return True if self._sender is None else self._sender.wait(timeout)

    # Sink ----------------------------------------------------------------------------------

    def open(self, run: RunInfo) -> None:
        mlflow = require("mlflow")
        self._task = run.task
        self._started_run = False
        active = mlflow.active_run()
        if self.run_id is not None:
            run_id = self.run_id
        elif active is not None:
            run_id = active.info.run_id
        elif self.start_run:
            run_id = mlflow.start_run().info.run_id
            self._started_run = True
        else:
            raise ValueError(
                "MLflowSink found no active MLflow run: call `mlflow.start_run()` before `fit`, "
                "pass `run_id=`, or `start_run=True` to have the sink start one. Received: "
                "run_id=None, start_run=False"
            )
        # Made once the run is known: a client for a local store would create it.
        self._sender = MetricSender(
            mlflow.MlflowClient(tracking_uri=self.tracking_uri),
            run_id,
            flush_interval=self.flush_interval,
            close_timeout=self.close_timeout,
        )

    def write(self, measurement: Measurement) -> None:
        if self._sender is None:
            return
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        self._sender.add(
            [
                Metric(
                    mlflow_metric_name(measurement.kind, tag, self._task),
                    float(value),
                    timestamp,
                    measurement.step,
                )
                for tag, value in measurement.scalars.items()
            ]
        )

    def close(self) -> None:
        sender = self._sender
        if sender is None:
            return
        sender.finish()
        if self._started_run:
            # Ended after its last metrics, and on this thread: MLflow's run stack is the
            # caller's.
            self._started_run = False
            sender.wait()
            self._end_started_run(sender)

    # Internals -----------------------------------------------------------------------------

    def _end_started_run(self, sender: MetricSender) -> None:
        mlflow = require("mlflow")
        active = mlflow.active_run()
        try:
            if active is not None and active.info.run_id == sender.run_id:
                mlflow.end_run()
            else:
                sender.client.set_terminated(sender.run_id)
        except Exception as error:  # noqa: BLE001
            sender.warn_once(f"ending the run: {type(error).__name__}: {first_line(error)}")

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
