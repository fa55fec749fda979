"""A real MLflow tracking server on loopback with a SQLite backend store, for the sink tests.

``mlflow server`` (from ``mlflow-skinny`` plus the server's own packages: Flask, SQLAlchemy,
Alembic, waitress; see setup.cfg's ``test`` extra) runs the Flask tracking app under waitress
on ``127.0.0.1`` and a free port. ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`` leaves out the
server's background job runner (GenAI evaluation jobs), which the tracking API does not use.
The server runs in its own process group, killed whole when the test session is done.

Starting it takes seconds of imports and table creation (minutes on a fresh venv, where every
module is compiled first), so a test module launches it when it is imported (at collection) and
waits for it only in its first test: the start overlaps the tests that run before. The wait
counts from that first test, asks until a tracking request is answered (refused connections and
slow answers are "not yet") and relaunches a server that exited before answering.
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

from tied_process import tied_popen

# Seconds from when a test first needs the server. A cold first start on a fresh venv compiles
# every module the server imports (twice: the CLI, which creates the SQLite tables, then the
# waitress process it starts) on a machine busy with the suite's other tests.
START_TIMEOUT = 300.0
LAUNCHES = 3  # a server that exits before answering (its port taken meanwhile) is relaunched
HEALTH = "/health"
# A tracking-API read: answered once the serving process has opened the store, which /health
# does not need.
TRACKING = "/api/2.0/mlflow/experiments/search?max_results=1"


class MLflowServer:
    """``mlflow server`` on ``127.0.0.1``, launched at once; :meth:`wait_until_up` waits for it,
    :meth:`stop` ends it (idempotent, and at exit at the latest).

    Args:
        folder: Holds the SQLite store, the artifacts and the server's logs.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.launches = 0
        self.start_seconds: float | None = None  # last launch to its first tracking answer
        self._launch()
        atexit.register(self.stop)

    def _launch(self) -> None:
        self.launches += 1
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = self.folder / f"server-{self.launches}.log"
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(self.folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--waitress-opts",
            "--threads=4",
        ]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.log, "w") as log:
            self.process = tied_popen(
                command, cwd=self.folder, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.launched = time.monotonic()
        self._killed = False

    def wait_until_up(self) -> MLflowServer:
        """Wait until the server answers a tracking request; relaunch it if it exits first;
        raise with the servers' logs if it does not answer within :data:`START_TIMEOUT`."""
        # Measured from now, not from the launch at collection: how long the tests before
        # this one took says nothing about how far the server got meanwhile.
        deadline = time.monotonic() + START_TIMEOUT
        while self.start_seconds is None and time.monotonic() < deadline:
            if self.process.poll() is not None:
                if self.launches >= LAUNCHES:
                    break
                self.stop()  # what the exited launch left in its process group
                self._launch()
            elif _answers(self.uri + HEALTH) and _answers(self.uri + TRACKING):
                self.start_seconds = time.monotonic() - self.launched
            else:
                time.sleep(0.2)
        if self.start_seconds is not None:
            return self
        self.stop()
        logs = "\n".join(
            f"--- {path.name}\n{path.read_text()[-3000:]}"
            for path in sorted(self.folder.glob("server-*.log"))
        )
        raise RuntimeError(
            f"mlflow server did not answer within {START_TIMEOUT:.0f} s "
            f"({self.launches} launches):\n{logs}"
        )

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if not self._killed:  # once: the group id may be reused after its processes are gone
            self._killed = True
            try:  # at once: a stop mid-fit is what one test is about; the group, whatever is left
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


def _answers(url: str) -> bool:
    """Whether ``url`` answers 200; a refused, reset or slow connection is "not yet"."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:  # URLError, HTTPError, timeouts: all OSError
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
