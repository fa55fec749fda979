"""Run worker processes as one TensorFlow cluster on loopback, off the network when possible.

TensorFlow's gRPC server listens on every interface (it binds ``0.0.0.0:<port>``; ``TF_CONFIG``
only says where peers connect). So the workers are started by a launcher (this file, run as a
script) inside a fresh network namespace that holds nothing but a loopback interface
(``unshare -rn``: Linux user and network namespaces), where ``127.0.0.1`` is all there is. Where
the system does not allow that, the launcher runs on the host and the workers listen on free
ports of the host for the few seconds they live; addresses are ``127.0.0.1`` either way.

The launcher picks free ports, writes each worker's ``TF_CONFIG``, waits for every worker until
the deadline, kills whatever is left (the whole process group), and prints one JSON line with
each worker's exit code and output. The caller kills the launcher's process group too if it
overruns, so nothing outlives a test.

Example:
    results = run_cluster(code, [{"X": "1"}, {"X": "2"}], deadline=120)
    for returncode, output in results: ...
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

from tied_process import tied_popen

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


@functools.cache
def confined() -> bool:
    """Whether workers can run in their own network namespace here."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False)
    return probe.returncode == 0


def run_cluster(
    code: str, envs: list[dict[str, str | None]], deadline: float
) -> list[tuple[int, str]]:
    """Run ``python -c code`` once per entry of ``envs`` as workers ``0..n-1`` of one cluster.

    Args:
        code: The workers' program; it reads its role from ``TF_CONFIG``.
        envs: Environment variables per worker, on top of this process's environment; a value
            of ``None`` removes the variable.
        deadline: Seconds before every worker is killed.

    Returns:
        ``(returncode, stdout and stderr)`` per worker; a killed worker has a negative code.

    Raises:
        RuntimeError: If the launcher itself fails or overruns.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as spec:
        json.dump({"code": code, "envs": envs, "deadline": deadline}, spec)
    command = [sys.executable, __file__, spec.name]
    if confined():
        command = ["unshare", "-rn", *command, "--loopback-up"]
    launcher = tied_popen(command, stdout=subprocess.PIPE, text=True)
    try:
        output, _ = launcher.communicate(timeout=deadline + 30)
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"the cluster launcher overran {deadline + 30} s") from error
    finally:
        _kill_group(launcher)
        os.unlink(spec.name)
    lines = [line for line in output.splitlines() if line.startswith("CLUSTER ")]
    if launcher.returncode != 0 or not lines:
        raise RuntimeError(f"the cluster launcher failed ({launcher.returncode}):\n{output}")
    return [tuple(result) for result in json.loads(lines[-1].removeprefix("CLUSTER "))]


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _bring_loopback_up() -> None:
    """``ip link set lo up``, without needing ``ip``: a new namespace's loopback starts down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | _IFF_UP, b""))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(spec_path: str) -> None:
    with open(spec_path) as file:
        spec = json.load(file)
    addresses = [f"127.0.0.1:{_free_port()}" for _ in spec["envs"]]
    workers = []
    for index, extra in enumerate(spec["envs"]):
        task = {"type": "worker", "index": index}
        env = dict(os.environ, **extra)
        for name in [name for name, value in extra.items() if value is None]:
            del env[name]
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": addresses}, "task": task})
        workers.append(
            subprocess.Popen(
                [sys.executable, "-c", spec["code"]],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    end = time.monotonic() + spec["deadline"]
    for worker in workers:
        try:
            output, _ = worker.communicate(timeout=max(1.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            for each in workers:
                each.kill()
            output, _ = worker.communicate()
        outputs.append(output)
    for worker in workers:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    results = [[worker.returncode, output] for worker, output in zip(workers, outputs, strict=True)]
    print("CLUSTER " + json.dumps(results), flush=True)


if __name__ == "__main__":
    if "--loopback-up" in sys.argv:
        _bring_loopback_up()
    _launch(sys.argv[1])
