"""A tf.data service on this machine: one dispatcher and N workers, to try the service out.

What can be bound, honestly: TensorFlow 2.21's ``DispatchServer`` and ``WorkerServer`` listen on
*every* network interface (gRPC ``[::]:port``). ``DispatcherConfig`` and ``WorkerConfig`` have a
``port`` but no bind address, so no option keeps them on loopback; only a firewall can. What can
be chosen is the address the servers *advertise*: the workers register with the dispatcher as
``<host>:<port>`` (``WorkerConfig.worker_address`` and ``data_transfer_address``), and clients
connect to the workers at that address. ``host`` defaults to ``localhost``, so everything talks
over loopback; pass this machine's name or IP for trainers on other machines.

``tfthroughput service`` runs :class:`LocalDataService` with worker processes until Ctrl-C.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from tfthroughput._optional import import_tensorflow
from tfthroughput._validation import check_positive_int

_UNSPECIFIED_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})  # not addresses to connect to


class LocalDataService:
    """A tf.data service dispatcher and workers on this machine, started at construction.

    Args:
        workers: Number of workers. Defaults to 1.
        port: The dispatcher's port; 0 (default) picks a free one.
        worker_port: The first worker's port, the others following it; 0 (default) picks free
            ports.
        host: The name or IP clients use to reach this machine, advertised for the workers and
            used in :attr:`address`. Defaults to ``"localhost"``. The servers listen on all
            interfaces whatever it is (TensorFlow has no bind address; see the module docstring).
        processes: Run each worker in its own Python process (as on a real cluster; functions
            that call back into Python, such as ``tf.py_function`` or ``from_generator``, cannot
            run there). Defaults to ``False``: the workers run in this process, where such
            functions work, which suits tests and notebooks.
        timeout: Seconds to wait for all workers to register. Defaults to 60.

    Raises:
        TypeError / ValueError: If an argument is out of range, e.g. ``host="0.0.0.0"``.
        OSError: If the dispatcher cannot start on ``port`` (in use, or a dispatcher answers
            there already).
        DataServiceUnavailable: If the workers did not register in time, or a worker process
            exited (its error output is in the message).

    Example:
        >>> with LocalDataService(workers=2) as service:  # doctest: +SKIP
        ...     ds = build_pipeline((x, y), preprocess_fn=decode, service=service.address)
        ...     model.fit(ds, epochs=3)
    """

    def __init__(
        self,
        workers: int = 1,
        *,
        port: int = 0,
        worker_port: int = 0,
        host: str = "localhost",
        processes: bool = False,
        timeout: float = 60.0,
    ) -> None:
        check_positive_int("workers", workers)
        for name, value in (("port", port), ("worker_port", worker_port)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 65536:
                raise ValueError(
                    f"`{name}` must be 0 (any free port) .. 65535. Received: {name}={value!r}"
                )
        check_advertised_host(host)
        tf = import_tensorflow("tfthroughput.data.LocalDataService")

        self._service = tf.data.experimental.service
        self._host = host
        self._in_process: list[Any] = []
        self._processes: list[tuple[subprocess.Popen, Any]] = []
        self._dispatcher = None
        if port and _dispatcher_answers(port):
            # gRPC shares a port between servers (SO_REUSEPORT): refuse instead of splitting it.
            raise OSError(f"A tf.data service dispatcher already answers on port {port}.")
        try:
            self._dispatcher = self._service.DispatchServer(
                self._service.DispatcherConfig(port=port)
            )
        except RuntimeError as error:  # TensorFlow's only word on a port it cannot bind
            raise OSError(f"Could not start a dispatcher on port {port}: {error}") from None
        self.port = int(self._dispatcher.target.rpartition(":")[2])
        self.address = f"grpc://{host}:{self.port}"
        # The workers find the dispatcher over loopback: it runs on this machine.
        local_dispatcher = f"localhost:{self.port}"
        try:
            for index in range(workers):
                next_port = worker_port + index if worker_port else 0
                if processes:
                    self._processes.append(_start_worker_process(local_dispatcher, host, next_port))
                else:
                    config = _worker_config(self._service, local_dispatcher, host, next_port)
                    self._in_process.append(self._service.WorkerServer(config))
            self.worker_addresses = self._wait_for_workers(local_dispatcher, workers, timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_for_workers(self, dispatcher: str, count: int, timeout: float) -> tuple[str, ...]:
        from tfthroughput.data.dispatcher import DataServiceUnavailable, dispatcher_workers

        deadline = time.monotonic() + timeout
        while True:
            problem = self.exited_worker()
            if problem:
                raise DataServiceUnavailable(problem)
            try:
                return dispatcher_workers(dispatcher, count=count, timeout=1.0)
            except DataServiceUnavailable:
                if time.monotonic() > deadline:
                    raise

    @property
    def worker_pids(self) -> tuple[int, ...]:
        """Process ids of the worker processes (empty when the workers run in this process)."""
        return tuple(process.pid for process, _ in self._processes)

    def exited_worker(self) -> str | None:
        """Why a worker process has exited (with its error output), or ``None``."""
        for index, (process, errors) in enumerate(self._processes):
            if process.poll() is not None:
                errors.seek(0)
                tail = errors.read().decode(errors="replace")[-2000:]
                return f"worker {index} exited with status {process.returncode}:\n{tail}"
        return None

    def wait(self, poll: float = 0.5) -> str:
        """Block until a worker process exits (returns why) or Ctrl-C (``KeyboardInterrupt``)."""
        while True:
            problem = self.exited_worker()
            if problem:
                return problem
            time.sleep(poll)

    def stop(self) -> None:
        """Stop the workers, then the dispatcher; idempotent."""
        for process, _ in self._processes:
            if process.stdin and not process.stdin.closed:
                process.stdin.close()  # the worker process stops at end of input
        for process, errors in self._processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            errors.close()
        self._processes.clear()
        for worker in self._in_process:
            worker.stop()
        self._in_process.clear()
        if self._dispatcher is not None:
            self._dispatcher.stop()
            self._dispatcher = None

    def __enter__(self) -> LocalDataService:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __str__(self) -> str:
        kind = "processes" if self._processes else "in this process"
        ports = ", ".join([str(self.port)] + [a.rpartition(":")[2] for a in self.worker_addresses])
        return "\n".join(
            [
                f"tf.data service dispatcher: {self.address}",
                f"workers ({len(self.worker_addresses)}, {kind}): "
                + ", ".join(self.worker_addresses),
                f'Use it: build_pipeline(..., service="{self.address}")',
                f"TensorFlow's servers listen on all network interfaces (ports {ports}); "
                f"{self._host!r} is only the address they advertise.",
            ]
        )


def check_advertised_host(host: object) -> str:
    """Check a ``host`` for :class:`LocalDataService`; no TensorFlow import, for the CLI.

    Raises:
        ValueError: If ``host`` is not a name or IP address to connect to (e.g. ``0.0.0.0``,
            or it carries a port).
    """
    if not isinstance(host, str) or host in _UNSPECIFIED_HOSTS or host.count(":") == 1:
        raise ValueError(
            "`host` must be a name or IP address (IPv6 in brackets) that clients can connect "
            "to, without a port; TensorFlow's servers listen on all interfaces already. "
            f"Received: host={host!r}"
        )
    return host


def _dispatcher_answers(port: int) -> bool:
    import grpc

    from tfthroughput.data.dispatcher import ask_for_workers

    try:
        ask_for_workers(f"localhost:{port}", timeout=1.0)
    except grpc.RpcError:
        return False
    return True


# A worker's stop waits for its heartbeat thread, which sleeps between heartbeats (30 s by
# TensorFlow's default): leaving the service's ``with`` block took 30.3 s after a test file's
# jobs. A heartbeat a second to a dispatcher on this machine costs nothing measurable.
HEARTBEAT_MS = 1000


def _worker_config(service: Any, dispatcher: str, host: str, port: int) -> Any:
    return service.WorkerConfig(
        dispatcher_address=dispatcher,
        worker_address=f"{host}:%port%",
        data_transfer_address=f"{host}:%dts_port%",
        port=port,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )


def _start_worker_process(dispatcher: str, host: str, port: int) -> tuple[subprocess.Popen, Any]:
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        # Input work runs on the CPU; a worker must not take the trainer's GPU memory.
        "CUDA_VISIBLE_DEVICES": "",
    }
    errors = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-m", __name__, dispatcher, host, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=errors,
        env=env,
    )
    return process, errors


def _worker_process_main(argv: list[str]) -> int:
    """A worker process: serve until standard input ends (the parent closed it, or died)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    import tensorflow as tf

    dispatcher, host, port = argv
    service = tf.data.experimental.service
    worker = service.WorkerServer(_worker_config(service, dispatcher, host, int(port)))
    sys.stdin.buffer.read()
    worker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_worker_process_main(sys.argv[1:]))
