"""``PrometheusSink``: the latest window's figures on an HTTP endpoint for Prometheus to scrape.

Exposed (every series labelled ``run`` and ``task``; GPU series also ``gpu``, the index of
``gpu<i>``; statistics also ``statistic``, one of the monitor's ``statistics``):

- ``tfthroughput_examples_per_second``, ``tfthroughput_steps_per_second``,
  ``tfthroughput_window_seconds``, ``tfthroughput_joules_per_example``: the latest window's
  figures (gauges).
- ``tfthroughput_gpu_<metric>{gpu, statistic}`` (e.g. ``tfthroughput_gpu_utilization_percent``)
  and ``tfthroughput_host_<metric>{statistic}`` (e.g. ``tfthroughput_host_cpu_percent``): the
  latest window's statistics (gauges), the same values as the TensorBoard tags
  ``window/gpu0/utilization_percent/mean`` and so on.
  ``tfthroughput_gpu_busy_but_idle_percent{gpu}`` where SM activity is read.
- ``tfthroughput_input_wait_percent``: the latest window's share of time spent waiting for
  batches (``input/wait_percent``), where the monitor measures it.
- ``tfthroughput_steps_total``, ``tfthroughput_examples_total`` and
  ``tfthroughput_gpu_energy_joules_total{gpu}``: counters over the ``fit``.

"The latest window": with ``update_freq`` set, each window inside an epoch; with
``update_freq="epoch"`` the monitor writes no windows, and each epoch is the window.

The endpoint listens on ``127.0.0.1`` unless given another ``address`` (``"0.0.0.0"`` to let a
Prometheus server on another host scrape it), on ``port`` (0: any free port, read back from
:attr:`PrometheusSink.port` and printed once). It starts with ``fit`` and stops with it.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import socketserver
import sys
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tfthroughput.hardware.activity import (
    BUSY_BUT_IDLE,
    busy_but_idle_percent,
    utilization_and_sm_activity,
)
from tfthroughput.sinks._extras import install_hint, missing, require
from tfthroughput.sinks.sink import Measurement, RunInfo, Sink

PREFIX = "tfthroughput_"
# The endpoint's thread blocks until a request comes, with no polling (prometheus_client's own
# start_http_server wakes every 0.5 s, and the end of fit would wait for it): to stop it, the
# sink sets a flag and makes one connection of its own, which wakes it.
# Figures (Measurement.figures keys) -> gauge names.
FIGURE_GAUGES = {
    "examples_per_second": "examples_per_second",
    "steps_per_second": "steps_per_second",
    "seconds": "window_seconds",
    "joules_per_example": "joules_per_example",
}


class PrometheusSink(Sink):
    """Serves the monitor's latest window on ``http://<address>:<port>/metrics`` during ``fit``.

    Args:
        port: The TCP port; 0 for any free one (see :attr:`port`). Required: a cluster of
            workers on one host needs one port each.
        address: The address to listen on. Defaults to ``"127.0.0.1"`` (this host only).
        run: The ``run`` label. Defaults to None: the name of the monitor's ``log_dir``
            folder.

    Raises:
        TypeError, ValueError: For invalid arguments, naming the argument and value.
        ImportError: If ``prometheus_client`` is not installed.

    Example:
        >>> sink = PrometheusSink(port=9400)  # doctest: +SKIP
        >>> monitor = GPUMonitor(update_freq="30s", sinks=[sink])  # doctest: +SKIP
        >>> model.fit(data, callbacks=[monitor])  # doctest: +SKIP
    """

    def __init__(self, port: int, *, address: str = "127.0.0.1", run: str | None = None) -> None:
        if missing("prometheus_client"):
            raise install_hint("prometheus_client")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(
                "`port` must be a TCP port number from 0 to 65535 (0: any free port). "
                f"Received: port={port!r}"
            )
        try:
            ipaddress.ip_address(address)
        except (TypeError, ValueError):
            raise ValueError(
                '`address` must be an IP address to listen on, e.g. "127.0.0.1" (the default) '
                f'or "0.0.0.0". Received: address={address!r}'
            ) from None
        if run is not None and not (isinstance(run, str) and run):
            raise TypeError(f"`run` must be a non-empty string. Received: run={run!r}")
        self.requested_port = port
        self.address = address
        self.run = run
        self.port: int | None = None  # the port listened on, while a fit runs
        self._reset()

    def _reset(self) -> None:
        self._server = None
        self._server_thread: threading.Thread | None = None
        self._registry = None
        self._labels: dict[str, str] = {}
        self._metrics: dict[str, object] = {}
        self._saw_window = False
        self._lock = threading.Lock()

    @property
    def url(self) -> str | None:
        """``http://<address>:<port>/metrics`` while a ``fit`` runs, else None."""
        if self.port is None:
            return None
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    # Sink ----------------------------------------------------------------------------------

    def open(self, run: RunInfo) -> None:
        prometheus_client = require("prometheus_client")
        self._reset()
        self._registry = prometheus_client.CollectorRegistry()
        name = self.run or os.path.basename(os.path.abspath(run.log_dir))
        self._labels = {"run": name, "task": run.task or "local"}
        self._statistics = run.statistics
        try:
            server = _serve(prometheus_client.make_wsgi_app(self._registry), self)
        except OSError as error:
            raise ValueError(
                f"PrometheusSink cannot listen on {self.address}:{self.requested_port} "
                f"({error.strerror or error}). Received: port={self.requested_port}, "
                f"address={self.address!r}"
            ) from error
        stop = threading.Event()
        thread = threading.Thread(
            target=_serve_until, args=(server, stop), name="tfthroughput-prometheus", daemon=True
        )
        thread.start()
        self._server, self._server_thread, self._stop = server, thread, stop
        self.port = server.server_address[1]
        print(f"tfthroughput: Prometheus metrics at {self.url}", file=sys.stderr, flush=True)

    def write(self, measurement: Measurement) -> None:
        if self._registry is None:
            return
        with self._lock:
            if measurement.kind == "window":
                self._saw_window = True
            elif self._saw_window:
                return  # the epoch's windows were shown already: the epoch would repeat them
            self._show(measurement)

    def close(self) -> None:
        server, thread = self._server, self._server_thread
        self._server = self._server_thread = None
        self._registry = None
        self.port = None
        if server is not None:
            self._stop.set()
            _wake(server)
            thread.join(5.0)
            server.server_close()

    # Internals -----------------------------------------------------------------------------

    def _show(self, measurement: Measurement) -> None:
        for figure, value in measurement.figures.items():
            if figure in FIGURE_GAUGES:
                self._gauge(FIGURE_GAUGES[figure], f"The latest window's {figure}.").labels(
                    **self._labels
                ).set(value)
        if measurement.wait_percent is not None:
            self._gauge(
                "input_wait_percent", "The latest window's share of time waiting for batches."
            ).labels(**self._labels).set(measurement.wait_percent)
        if measurement.steps:
            self._counter("steps", "Optimizer steps taken in the fit.").labels(**self._labels).inc(
                measurement.steps
            )
        if measurement.examples:
            self._counter("examples", "Examples trained on in the fit.").labels(**self._labels).inc(
                measurement.examples
            )
        stats = measurement.stats
        for key, metric_stats in stats.items():
            where = _where(key.source)
            if where is None:
                continue
            kind, extra = where
            gauge = self._gauge(
                f"{kind}_{key.metric}",
                f"The latest window's {key.metric} of the {kind}, per statistic.",
                (*extra, "statistic"),
            )
            for statistic in self._statistics:
                gauge.labels(**self._labels, **extra, statistic=statistic).set(
                    getattr(metric_stats, statistic)
                )
        for key, total in stats.totals.items():
            where = _where(key.source)
            if where is not None and where[0] == "gpu" and total.amount >= 0:
                self._counter(
                    f"gpu_{key.metric}", f"{key.metric} of the GPU over the fit.", ("gpu",)
                ).labels(**self._labels, **where[1]).inc(total.amount)
        for source, (utilization, sm_activity) in utilization_and_sm_activity(stats).items():
            where = _where(source)
            if where is not None and where[0] == "gpu":
                self._gauge(
                    f"gpu_{BUSY_BUT_IDLE}",
                    "The latest window's mean GPU-Util minus mean SM activity.",
                    ("gpu",),
                ).labels(**self._labels, **where[1]).set(
                    busy_but_idle_percent(utilization, sm_activity)
                )

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...] = ()):
        return self._metric("Gauge", name, documentation, labels)

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...] = ()):
        return self._metric("Counter", name, documentation, labels)

    def _metric(self, kind: str, name: str, documentation: str, labels: tuple[str, ...]):
        metric = self._metrics.get(name)
        if metric is None:
            prometheus_client = require("prometheus_client")
            metric = getattr(prometheus_client, kind)(
                PREFIX + name,
                documentation,
                (*self._labels, *labels),
                registry=self._registry,
            )
            self._metrics[name] = metric
        return metric

    def __deepcopy__(self, memo) -> PrometheusSink:
        clone = PrometheusSink(self.requested_port, address=self.address, run=self.run)
        memo[id(self)] = clone
        return clone


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never holds up the end of fit


class _IPv6ThreadingServer(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        """No line on stderr for every scrape."""


def _serve(app, sink: PrometheusSink) -> WSGIServer:
    server_class = _IPv6ThreadingServer if ":" in sink.address else _ThreadingServer
    return make_server(
        sink.address,
        sink.requested_port,
        app,
        server_class=server_class,
        handler_class=_QuietHandler,
    )


def _serve_until(server: WSGIServer, stop: threading.Event) -> None:
    """Answer scrapes until ``stop`` is set (each wait blocks: no timeout, no polling)."""
    while not stop.is_set():
        server.handle_request()


def _wake(server: WSGIServer) -> None:
    """One connection to the endpoint, so its thread's wait returns and sees the stop flag."""
    host, port = server.server_address[:2]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except OSError:
        pass  # the thread ends at the next scrape; close() waits for it at most 5 s


def _where(source: str) -> tuple[str, dict[str, str]] | None:
    """``("gpu", {"gpu": "0"})`` for ``gpu0``, ``("host", {})`` for ``host``, else None."""
    if source == "host":
        return "host", {}
    index = source.removeprefix("gpu")
    if index != source and index.isdigit():
        return "gpu", {"gpu": index}
    return None
