"""The suite's own configuration ends a run that loses a worker, in minutes, naming the test.

Each test plants a fault in a small suite of its own and runs it the way the README's test
command runs ours (`pytest -n 3` with this repository's pyproject.toml, so its addopts and
timeout): a worker that aborts with a server running, and a test that hangs. Without
``--max-worker-restart=0`` xdist replaces a crashed worker and re-runs the crashing file, and
under ``--dist loadfile`` the replacement can wait forever; without a per-test timeout a hang
waits for CI's limit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
PYPROJECT = TESTS.parent / "pyproject.toml"
# A planted run ends in seconds; this bound is what "in minutes, never a wait" means here.
RUN_DEADLINE = 120

CRASH = """
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.environ["TIED_PROCESS_DIR"])
from tied_process import tied_popen


def _group_size(group):
    size = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        size += int(fields[2]) == group
    return size


def test_passes_before():
    pass


def test_aborts_with_a_server_running():
    command = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"]
    server = tied_popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    Path(os.environ["PLANTED_GROUP_FILE"]).write_text(str(server.pid))
    deadline = time.monotonic() + 30
    while _group_size(server.pid) < 2 and time.monotonic() < deadline:  # the guard and server
        time.sleep(0.05)
    if os.environ.get("PLANT_CRASH"):
        os.abort()
"""

OTHER_FILE = """
import time


def test_one():
    time.sleep(0.5)


def test_two():
    time.sleep(0.5)
"""

HANG = """
import os
import time


def test_hangs():
    if os.environ.get("PLANT_HANG"):
        time.sleep(3600)
"""


def _run_planted(folder: Path, *options: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "-c", str(PYPROJECT), "--rootdir", str(folder)]
    command += ["-n", "3", "-p", "no:cacheprovider", *options, str(folder)]
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=RUN_DEADLINE,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"the planted run was still going after {RUN_DEADLINE} s:\n{error.stdout}")


def _processes_in_group(group: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended while we looked
        if int(fields[2]) == group:
            members.append(int(stat.parent.name))
    return members


def _write(folder: Path, **files: str) -> None:
    for name, text in files.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process groups in /proc")
def test_a_worker_that_dies_fails_the_run_naming_its_test_and_takes_its_server(tmp_path):
    _write(tmp_path, test_planted_crash=CRASH, test_planted_other=OTHER_FILE)
    group_file = tmp_path / "group"
    env = {
        "PLANT_CRASH": "1",
        "TIED_PROCESS_DIR": str(TESTS),
        "PLANTED_GROUP_FILE": str(group_file),
    }

    run = _run_planted(tmp_path, env=env)

    assert run.returncode == 1, run.stdout + run.stderr
    crashed = "crashed while running 'test_planted_crash.py::test_aborts_with_a_server_running'"
    assert re.search(rf"worker 'gw\d' {re.escape(crashed)}", run.stdout), run.stdout
    assert "crashed and worker restarting disabled" in run.stdout
    group = int(group_file.read_text())
    deadline = time.monotonic() + 10  # the guard looks at its parent every 0.2 s
    while _processes_in_group(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_in_group(group) == [], "the server outlived the worker that started it"


def test_the_same_suite_passes_without_the_planted_crash(tmp_path):
    # The planted suite is sound: only the crash fails it.
    _write(tmp_path, test_planted_crash=CRASH, test_planted_other=OTHER_FILE)
    env = {"TIED_PROCESS_DIR": str(TESTS), "PLANTED_GROUP_FILE": str(tmp_path / "group")}
    run = _run_planted(tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout


def test_a_test_that_hangs_fails_the_run_at_the_timeout_naming_it(tmp_path):
    _write(tmp_path, test_planted_hang=HANG, test_planted_other=OTHER_FILE)
    options = ("--timeout", "5", "-o", "faulthandler_timeout=3")
    run = _run_planted(tmp_path, *options, env={"PLANT_HANG": "1"})

    # pytest-timeout's thread method ends the worker: xdist reports it as a crash of that test.
    assert run.returncode == 1, run.stdout + run.stderr
    assert re.search(
        r"worker 'gw\d' crashed while running 'test_planted_hang.py::test_hangs'", run.stdout
    )
    assert "2 passed" in run.stdout  # the other worker's file ran to its end
    # faulthandler's dump before the kill says where it hung, on the worker's stderr.
    assert "in test_hangs" in run.stderr
