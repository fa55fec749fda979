"""A real MLflow tracking server on loopback with a SQLite backend store, for the sink tests.

``mlflow server`` (from ``mlflow-skinny`` plus the server's own packages: Flask, SQLAlchemy,
Alembic, waitress; see setup.cfg's ``test`` extra) runs the Flask tracking app under waitress
on ``127.0.0.1`` and a free port. ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`` leaves out the
server's background job runner (GenAI evaluation jobs), which the tracking API does not use.
The server runs in its own process group, killed whole when the test session is done.

Starting it takes seconds of imports and table creation, so a test module launches it when it
is imported (at collection) and waits for it only in its first test: the start overlaps the
tests that run before.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

START_TIMEOUT = 120.0  # seconds; the first start creates the SQLite tables (Alembic)


class MLflowServer:
    """``mlflow server`` on ``127.0.0.1``, launched at once; :meth:`wait_until_up` waits for it,
    :meth:`stop` ends it (idempotent, and at exit at the latest).

    Args:
        folder: Holds the SQLite store, the artifacts and the server's log.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = folder / "server.log"
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--waitress-opts",
            "--threads=4",
        ]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                command,
                cwd=folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.launched = time.monotonic()
        self.start_seconds: float | None = None  # launch to first healthy answer
        atexit.register(self.stop)

    def wait_until_up(self) -> MLflowServer:
        """Wait for the health endpoint; raise with the server's log if it does not come up."""
        # The server is launched at collection, possibly long before this is called (a full
        # suite reaches the sink tests minutes later): always allow a few seconds of asking.
        deadline = max(self.launched + START_TIMEOUT, time.monotonic() + 15.0)
        while self.start_seconds is None and time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=1) as response:
                    if response.status == 200:
                        self.start_seconds = time.monotonic() - self.launched
            except OSError:
                time.sleep(0.2)
        if self.start_seconds is not None:
            return self
        self.stop()
        raise RuntimeError(f"mlflow server did not start:\n{self.log.read_text()[-3000:]}")

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            try:  # at once: a stop mid-fit is what one test is about
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
