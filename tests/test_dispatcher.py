"""dispatcher_workers: a real dispatcher's workers, asked over gRPC with a deadline."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import tensorflow as tf

from tfthroughput.data.dispatcher import (
    DataServiceUnavailable,
    dispatcher_host_port,
    dispatcher_workers,
)

SERVICE = tf.data.experimental.service


def test_returns_the_workers_once_as_many_as_asked_have_registered():
    dispatcher = SERVICE.DispatchServer()
    address = dispatcher.target.removeprefix("grpc://")
    workers = []

    def start_a_worker():
        workers.append(SERVICE.WorkerServer(SERVICE.WorkerConfig(dispatcher_address=address)))

    late = threading.Timer(1.0, start_a_worker)  # a worker still starting when first asked
    try:
        late.start()
        start = time.monotonic()
        (worker,) = dispatcher_workers(dispatcher.target, timeout=20)
        assert 1.0 <= time.monotonic() - start < 20
        assert worker == workers[0]._address  # "localhost:<its port>", as it advertises
        start = time.monotonic()
        with pytest.raises(DataServiceUnavailable, match="with 1 of 2 workers registered"):
            dispatcher_workers(address, count=2, timeout=1.0)
        assert 1.0 <= time.monotonic() - start < 20  # the timeout, then a reply: not a hang
    finally:
        late.join()
        for worker in workers:
            worker.stop()
        dispatcher.stop()


def test_a_silent_server_fails_after_the_timeout():
    with socket.socket() as silent:  # accepts connections, never speaks gRPC
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        start = time.monotonic()
        with pytest.raises(DataServiceUnavailable, match="within 1.5 s"):
            dispatcher_workers(f"127.0.0.1:{silent.getsockname()[1]}", timeout=1.5)
        assert 1.5 <= time.monotonic() - start < 20  # the timeout, then a reply: not a hang


def test_dispatcher_workers_refuses_bad_arguments():
    with pytest.raises(ValueError, match="Received: count=0"):
        dispatcher_workers("localhost:5050", count=0)
    with pytest.raises(ValueError, match="Received: timeout=-1"):
        dispatcher_workers("localhost:5050", timeout=-1)


@pytest.mark.parametrize(
    ("address", "expected"),
    [("grpc://localhost:5050", "localhost:5050"), ("10.0.0.2:06000", "10.0.0.2:6000")],
)
def test_addresses_are_read_as_host_and_port(address, expected):
    assert dispatcher_host_port(address) == expected
