"""`tfthroughput compare` and `run --baseline`: the CI gate over real runs whose speed is known.

The runs are real fits (a baseline here, the others in a script under `tfthroughput run`); each
training step costs a known time on the monitor's clock (`charge_calls`, with `autolog` given
that clock), so the examples/s compared are exact and no verdict rests on how fast this machine
ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
from fakes import CostClock, charge_calls
from script_runs import ROOT, run_command, write_script

from tfthroughput import MonitoringWarning, autolog
from tfthroughput.cli import main
from tfthroughput.report.throughput_gate import SLOWER_EXIT_CODE, UNMATCHED_EXIT_CODE

# argv: pairs of (log folder, seconds per step); each pair is one fit (3 epochs of 4 steps of
# 16 examples) whose run goes into that folder.
FITS = """
import sys
import keras, numpy as np, tfthroughput
from fakes import CostClock, charge_calls

clock = CostClock()
x = np.ones((64, 3), "float32")
pairs = sys.argv[1:]
for log_dir, per_step in zip(pairs[::2], pairs[1::2]):
    tfthroughput.autolog(log_dir=log_dir, clock=clock)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    charge_calls(model, clock, launch=0.0, per_step=float(per_step))
    model.fit(x, x[:, :1], batch_size=16, epochs=3, verbose=0)
"""


def _fit_base(folder) -> None:
    """``base``, in this process: autolog with the clock, one fit at 10 ms a step."""
    clock = CostClock()
    autolog(log_dir=folder / "base", clock=clock)
    with warnings.catch_warnings():
        # Where there is no NVML (CI), the monitor says once that GPU metrics are off.
        warnings.filterwarnings("ignore", "GPU metrics are off", MonitoringWarning)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        charge_calls(model, clock, launch=0.0, per_step=0.01)
        x = np.ones((64, 3), "float32")
        try:
            model.fit(x, x[:, :1], batch_size=16, epochs=3, verbose=0)
        finally:
            autolog(disable=True)


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """``base``; then, under ``tfthroughput run --baseline base``, ``same`` (as fast) and
    ``slow`` (a 5x slower fit-1, then a fit-2)."""
    folder = tmp_path_factory.mktemp("gate")
    _fit_base(folder)
    write_script(folder, "fits.py", FITS)
    fits = ["same", "0.01", "slow", "0.05", "slow", "0.01"]
    result = run_command(
        ["--log-dir", "slow", "--no-report", "--baseline", "base", "fits.py", *fits], cwd=folder
    )
    return folder, result


@pytest.fixture
def runs(gated):
    return gated[0]


def compare(capsys, *args: str) -> tuple[int, list[str]]:
    code = main(["compare", *args])
    return code, capsys.readouterr().out.splitlines()


def test_identical_runs_are_within_the_noise(runs, capsys):
    code, lines = compare(capsys, str(runs / "base"), str(runs / "same"))
    assert (code, lines) == (
        0,
        [
            "fit-1: within the noise: 1,600 examples/s [1,600-1,600] vs base "
            "1,600 examples/s [1,600-1,600], 1.00x"
        ],
    )


def test_a_slower_run_below_the_threshold_fails_and_a_run_on_one_side_is_named(runs, capsys):
    code, lines = compare(capsys, str(runs / "base"), str(runs / "slow"))
    assert code == SLOWER_EXIT_CODE
    assert lines == [
        "fit-1: too slow: 320 examples/s [320-320] vs base 1,600 examples/s [1,600-1,600], 0.20x",
        "fit-2: only in new (1,600 examples/s [1,600-1,600])",
    ]
    code, lines = compare(capsys, str(runs / "slow"), str(runs / "base"))
    assert code == UNMATCHED_EXIT_CODE
    assert lines[0].startswith("fit-1: faster: 1,600 examples/s") and lines[0].endswith("5.00x")
    assert lines[1] == "fit-2: only in base (1,600 examples/s [1,600-1,600])"
    code, lines = compare(capsys, str(runs / "base"), str(runs / "slow"), "--fail-below", "0.1")
    assert code == UNMATCHED_EXIT_CODE  # slower, but above the threshold: only fit-2 remains
    assert lines[0].startswith("fit-1: slower: 320 examples/s")


def test_json_on_stdout_for_ci_from_the_installed_command(runs):
    result = subprocess.run(
        [sys.executable, "-m", "tfthroughput.cli", "compare", "base", "slow", "--json"],
        cwd=runs,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == SLOWER_EXIT_CODE, result.stderr
    found = json.loads(result.stdout)
    assert found["exit_code"] == SLOWER_EXIT_CODE and found["fail_below"] == 0.95
    assert [(f["run"], f["status"]) for f in found["findings"]] == [
        ("fit-1", "too slow"),
        ("fit-2", "only in new"),
    ]
    new = {"median": 320.0, "low": 320.0, "high": 320.0, "epochs": 2}
    assert found["findings"][0]["new"] == new
    assert found["findings"][0]["ratio"] == pytest.approx(0.2)


def test_run_with_a_baseline_gates_after_the_script(gated):
    _, result = gated
    assert result.returncode == SLOWER_EXIT_CODE, result.stderr
    assert result.stderr.splitlines()[-2:] == [
        "fit-1: too slow: 320 examples/s [320-320] vs base 1,600 examples/s [1,600-1,600], 0.20x",
        "fit-2: only in new (1,600 examples/s [1,600-1,600])",
    ]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["base", "same", "--fail-below", "0"], "--fail-below must be a ratio in (0, 1]. "),
        (["base", "same", "--fail-below", "1.5"], "--fail-below must be a ratio in (0, 1]. "),
        (["base", "same", "--fail-below", "x"], "--fail-below must be a ratio in (0, 1]. "),
        (["nowhere", "same"], "BASE_LOGDIR has no monitored run (no such folder: 'nowhere')"),
        (["base", "nowhere"], "NEW_LOGDIR: no such folder: 'nowhere'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runs, capsys, monkeypatch, args, line):
    monkeypatch.chdir(runs)
    assert main(["compare", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (only,) = captured.err.splitlines()
    assert only.startswith(f"tfthroughput compare: error: {line}")
