"""LocalDataService and `tfthroughput service`: a real dispatcher and workers on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest
import tensorflow as tf
from interruptible import interruptible_popen, signal_state

from tfthroughput.data.dispatcher import DataServiceUnavailable, dispatcher_workers
from tfthroughput.data.pipeline import build_pipeline
from tfthroughput.data.service_cluster import LocalDataService


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _squares_through(address):
    dataset = build_pipeline(
        tf.data.Dataset.range(12), preprocess_fn=lambda i: i * i, batch_size=5, service=address
    )
    return sorted(int(v) for batch in dataset for v in batch.numpy())


def test_in_process_workers_register_and_serve_on_the_chosen_port():
    port = _free_port()
    with LocalDataService(workers=2, port=port) as service:
        assert service.address == f"grpc://localhost:{port}"
        assert len(service.worker_addresses) == 2
        assert all(a.startswith("localhost:") for a in service.worker_addresses)
        assert sorted(dispatcher_workers(service.address)) == sorted(service.worker_addresses)
        assert _squares_through(service.address) == [i * i for i in range(12)]
        text = str(service)
        assert f"tf.data service dispatcher: grpc://localhost:{port}" in text
        assert "workers (2, in this process)" in text
        assert "listen on all network interfaces" in text
    service.stop()  # idempotent
    with pytest.raises(DataServiceUnavailable):
        dispatcher_workers(f"localhost:{port}", timeout=0.5)


def test_the_advertised_host_is_what_workers_register_with():
    with LocalDataService(workers=1, host="127.0.0.1") as service:
        assert service.address.startswith("grpc://127.0.0.1:")
        assert service.worker_addresses[0].startswith("127.0.0.1:")
        assert _squares_through(service.address) == [i * i for i in range(12)]


def test_a_second_dispatcher_on_a_busy_port_is_refused():
    # gRPC would share the port between both servers (SO_REUSEPORT) and split their clients.
    with LocalDataService(workers=1) as service:
        with pytest.raises(OSError, match=f"already answers on port {service.port}"):
            LocalDataService(workers=1, port=service.port)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (dict(workers=0), ValueError, "Received: workers=0"),
        (dict(port=70000), ValueError, "Received: port=70000"),
        (dict(host="0.0.0.0"), ValueError, "listen on all interfaces already"),
        (dict(host="localhost:5050"), ValueError, "without a port"),
    ],
)
def test_bad_arguments_are_refused(arguments, error, message):
    with pytest.raises(error, match=message):
        LocalDataService(**arguments)


@pytest.mark.slow
def test_worker_processes_serve_and_stop_with_the_cluster():
    with LocalDataService(workers=2, processes=True, timeout=120) as service:
        processes = [psutil.Process(pid) for pid in service.worker_pids]
        assert len(processes) == 2 and os.getpid() not in service.worker_pids
        assert "workers (2, processes)" in str(service)
        assert _squares_through(service.address) == [i * i for i in range(12)]
        assert service.exited_worker() is None
        processes[1].kill()
        problem = service.wait(poll=0.1)
        assert problem.startswith("worker 1 exited with status -9")
    gone, alive = psutil.wait_procs(processes, timeout=10)
    assert not alive


# --- the `tfthroughput service` command ------------------------------------------------------


@pytest.mark.slow
def test_service_command_prints_the_address_serves_and_stops_on_ctrl_c():
    port = _free_port()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = interruptible_popen(
        [sys.executable, "-m", "tfthroughput.cli", "service", "--workers=1", f"--port={port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines = []
        while not lines or lines[-1] != "Ctrl-C stops the service.":
            line = command.stdout.readline()
            assert line, f"the command ended early: {command.stderr.read()}"
            lines.append(line.rstrip("\n"))
        assert lines[0] == f"tf.data service dispatcher: grpc://localhost:{port}"
        assert lines[1].startswith("workers (1, processes): localhost:")
        assert lines[2] == f'Use it: build_pipeline(..., service="grpc://localhost:{port}")'
        workers = psutil.Process(command.pid).children()
        assert len(workers) == 1
        assert _squares_through(f"grpc://localhost:{port}") == [i * i for i in range(12)]

        signals = signal_state(command.pid)
        command.send_signal(signal.SIGINT)
        try:
            out, err = command.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no answer to SIGINT in 60 s; the command's signals: {signals}")
    finally:
        if command.poll() is None:
            command.kill()
            command.communicate()
    assert command.returncode == 0, err
    assert out.strip() == "Stopping the tf.data service."
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--workers", "0"), "argument --workers: expected a positive integer, got '0'"),
        (("--port", "99999"), "argument --port: expected a port number 0..65535"),
        (("--host", "0.0.0.0"), "argument --host: `host` must be a name or IP address"),
    ],
)
def test_service_command_bad_arguments_exit_2(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "tfthroughput.cli", "service", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr
