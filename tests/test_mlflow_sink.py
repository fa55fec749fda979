"""MLflowSink against a real MLflow tracking server (loopback, SQLite store): the metrics read
back through MLflow's client equal the event files', beside ``mlflow.keras.autolog``; a server
stopped mid-fit leaves training alone with one warning.

One server for the module (:mod:`mlflow_server`); the test that stops it runs last.
"""

from __future__ import annotations

import gc
import shutil
import socket
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import keras
import mlflow
import numpy as np
import pytest
from events import read_scalars
from fits import STEPS_PER_EPOCH, EpochDial, fake_gpus, fit, tiny_model
from mlflow.entities import Metric
from mlflow_server import MLflowServer
from monitored_runs import DIAGNOSIS

from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.sinks import MLflowSink, log_report, mlflow_metric_name
from tfthroughput.sinks._mlflow_sender import MetricSender

# Launched at collection, so that it starts while the tests before this module run.
_SERVER = MLflowServer(Path(tempfile.mkdtemp(prefix="mlflow-server-")))


@pytest.fixture(scope="module")
def server():
    yield _SERVER.wait_until_up()
    _SERVER.stop()
    shutil.rmtree(_SERVER.folder, ignore_errors=True)


@pytest.fixture
def tracking(server, monkeypatch):
    """MLflow's client pointed at the server, and put back afterwards."""
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(server.uri)
    yield mlflow.MlflowClient(server.uri)
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(previous)


def _history(client, run_id: str, name: str) -> list[tuple[int, float]]:
    metrics = sorted(client.get_metric_history(run_id, name), key=lambda m: m.step)
    # TensorBoard keeps float32, MLflow float64: compare at TensorBoard's precision.
    return [(m.step, float(np.float32(m.value))) for m in metrics]


def test_metrics_read_back_from_the_server_equal_the_event_files_beside_autolog(tracking, tmp_path):
    mlflow.keras.autolog(
        log_models=False, log_datasets=False, log_model_signatures=False, silent=True
    )
    try:
        dial = EpochDial()
        monitor = GPUMonitor(
            tmp_path,
            interval=0.05,
            update_freq=2,
            sources=fake_gpus(dial),
            sinks=[MLflowSink(flush_interval=0.2)],
        )
        fit(tiny_model(), [dial, monitor], epochs=2)  # autolog opens and closes the run
        # fit returned without waiting for the last send; MLflow takes metrics into an ended
        # run (its status is not its lifecycle), so the last epoch arrives all the same.
        assert monitor.sinks[0].wait_until_sent()
    finally:
        mlflow.keras.autolog(disable=True)
        mlflow.flush_async_logging()
    run = mlflow.last_active_run()
    keys = set(tracking.get_run(run.info.run_id).data.metrics)

    tensorboard = read_scalars(monitor.run_dir)
    expected_names = set()
    for tag, points in tensorboard.items():
        if tag.startswith("window/"):
            name = mlflow_metric_name("window", tag)
            expected = points  # windows: at the global step in both
        else:
            name = mlflow_metric_name("epoch", tag)
            # TensorBoard's epoch axis is the epoch; MLflow's is the global step.
            expected = [((epoch + 1) * STEPS_PER_EPOCH, value) for epoch, value in points]
        expected_names.add(name)
        assert _history(tracking, run.info.run_id, name) == expected, tag
    assert _history(tracking, run.info.run_id, "window/gpu0.utilization_percent.mean") == [
        (2, 10.0),
        (4, 10.0),
        (6, 20.0),
        (8, 20.0),
    ]
    assert {"epoch/examples_per_second", "window/examples_per_second"} <= expected_names
    # autolog's own metrics sit beside the monitor's, no name shared and none clashing.
    assert "loss" in keys and expected_names <= keys
    assert {key for key in keys - expected_names if "/" in key} == set()


def test_a_diagnosis_is_attached_to_the_run_as_markdown(tracking):
    with mlflow.start_run() as run:
        path = log_report(DIAGNOSIS)
    assert path == "tfthroughput/DiagnosisReport.md"
    text = mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/{path}")
    assert text == DIAGNOSIS.to_markdown() and "input-bound" in text
    # MLflow's artifact client keeps an upload thread pool until it is collected.
    gc.collect()


def test_a_run_started_by_the_sink_ends_with_the_fit(tracking, tmp_path):
    sink = MLflowSink(start_run=True, flush_interval=0.2)
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(EpochDial()), sinks=[sink])
    fit(tiny_model(), [monitor], epochs=2)
    assert mlflow.active_run() is None
    run = mlflow.last_active_run()
    assert tracking.get_run(run.info.run_id).info.status == "FINISHED"
    steps = [step for step, _ in _history(tracking, run.info.run_id, "epoch/seconds")]
    assert steps == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]


def test_no_active_run_fails_before_the_first_step(tmp_path, monkeypatch):
    monkeypatch.setattr(mlflow, "active_run", lambda: None)  # whatever the session left
    monitor = GPUMonitor(
        tmp_path, interval=0.05, sources=fake_gpus(EpochDial()), sinks=[MLflowSink()]
    )
    with pytest.raises(ValueError, match=r"no active MLflow run.*start_run=True"):
        fit(tiny_model(), [monitor], epochs=1)


def test_without_mlflow_the_sink_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ImportError, match=r'pip install "tfthroughput\[mlflow\]"'):
        MLflowSink()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"flush_interval": 0}, "Received: flush_interval=0"),
        ({"close_timeout": -1}, "Received: close_timeout=-1"),
        ({"start_run": "yes"}, "start_run"),
        ({"run_id": 7}, "Received: run_id=7"),
    ],
)
def test_bad_arguments_fail_when_the_sink_is_made(arguments, message):
    with pytest.raises((TypeError, ValueError), match=message):
        MLflowSink(**arguments)


def test_the_end_of_fit_does_not_wait_for_a_silent_server(tmp_path, monkeypatch):
    # A server that accepts connections and never answers: MLflow's client waits for its
    # HTTP timeout (30 s here); with a close_timeout of 20 s, an end of fit that waited for
    # the last send would take 20 s.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    silent = socket.create_server(("127.0.0.1", 0))
    run_id = "0" * 32
    sink = MLflowSink(
        run_id,
        tracking_uri=f"http://127.0.0.1:{silent.getsockname()[1]}",
        flush_interval=0.05,
        close_timeout=20,
    )
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(EpochDial()), sinks=[sink])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.monotonic()
        history = fit(tiny_model(), [monitor], epochs=2)
        fit_seconds = time.monotonic() - started
        assert not sink.wait_until_sent(timeout=0.2)  # the first send still waits
    assert len(history.history["loss"]) == 2
    assert fit_seconds < 20, fit_seconds  # the close_timeout: what waiting would take at least
    assert sink.dropped_metrics > 0
    assert [str(w.message) for w in caught if "MLflowSink" in str(w.message)] == [
        f"MLflowSink could not log to run {run_id} (the tracking server took longer than "
        f"0.2 s; {sink.dropped_metrics} not sent). Training goes on; the monitor's metrics "
        "for MLflow are dropped from here on (TensorBoard's event files still hold them). "
        "Warned once."
    ]
    silent.close()  # the client's call fails at once, its thread ends
    _wait_for_senders()


@pytest.mark.parametrize("late_answer", ["refused", "accepted"])
def test_a_send_under_way_when_waiting_gives_up_counts_as_not_sent(monkeypatch, late_answer):
    # Every metric is inside the one log_batch call under way (the thread took them all before
    # the fit ended), the case a loaded machine makes common: giving up must still count and
    # warn about them, once, and an answer that comes afterwards settles the count.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    silent = socket.create_server(("127.0.0.1", 0))
    silent.settimeout(20)
    sender = MetricSender(
        mlflow.MlflowClient(f"http://127.0.0.1:{silent.getsockname()[1]}"),
        "0" * 32,
        flush_interval=0.01,
        close_timeout=20,
    )
    sender.add([Metric(f"m{i}", float(i), 0, 1) for i in range(7)])
    connection, _ = silent.accept()  # the call is under way, holding all seven
    sender.finish()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not sender.wait(timeout=0.05)
        assert not sender.wait(timeout=0.05)  # asked twice, counted once
    assert sender.dropped == 7
    assert [str(w.message) for w in caught] == [
        "MLflowSink could not log to run 00000000000000000000000000000000 (the tracking "
        "server took longer than 0.05 s; 7 not sent). Training goes on; the monitor's metrics "
        "for MLflow are dropped from here on (TensorBoard's event files still hold them). "
        "Warned once."
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if late_answer == "accepted":
            connection.recv(65536)
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: 2\r\nConnection: close\r\n\r\n{}"
            )
        connection.close()
        assert sender.wait(timeout=20)
    assert sender.dropped == (0 if late_answer == "accepted" else 7)
    assert caught == []  # the late failure is not warned about again
    silent.close()


def _wait_for_senders() -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
        t.name == "tfthroughput-mlflow" for t in threading.enumerate()
    ):
        time.sleep(0.05)


class _StopServer(keras.callbacks.Callback):
    def __init__(self, server: MLflowServer, epoch: int) -> None:
        super().__init__()
        self.server, self.epoch = server, epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            self.server.stop()


# Runs last in this module: it stops the module's server.
def test_a_server_stopped_mid_fit_leaves_training_alone_with_one_warning(
    server, tracking, tmp_path, monkeypatch
):
    # MLflow's own client retries a refused call with backoff for minutes by default; the
    # sink's thread would wait those out without training noticing, but the test would not.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    run_id = tracking.create_run(tracking.create_experiment("stopped")).info.run_id
    dial = EpochDial()
    monitor = GPUMonitor(
        tmp_path,
        interval=0.05,
        update_freq=2,
        sources=fake_gpus(dial),
        sinks=[MLflowSink(run_id, flush_interval=0.05)],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = fit(tiny_model(), [dial, _StopServer(server, 1), monitor], epochs=3)
        monitor.sinks[0].wait_until_sent()
    assert not server.running
    assert len(history.history["loss"]) == 3
    sink_warnings = [
        str(w.message)
        for w in caught
        if issubclass(w.category, MonitoringWarning) and "MLflowSink" in str(w.message)
    ]
    assert len(sink_warnings) == 1, sink_warnings
    assert "Training goes on" in sink_warnings[0]
    assert monitor.sinks[0].dropped_metrics > 0
    # TensorBoard has every epoch and window all the same.
    scalars = read_scalars(monitor.run_dir)
    assert [step for step, _ in scalars["gpu0/utilization_percent/mean"]] == [0, 1, 2]
    assert [step for step, _ in scalars["window/seconds"]] == [2, 4, 6, 8, 10, 12]
