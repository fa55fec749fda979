"""`tfthroughput run`: users' unchanged scripts, run as real subprocesses; the event files they
left are read back and the exit codes asserted."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap

import pytest
from events import read_scalars
from script_runs import run_command, write_script

RULE = "-" * 78

# Two fits (arrays, then tf.data), a predict, a multiprocessing pool (spawn) whose worker is a
# function of the script, a class pickled through __main__, argparse over sys.argv, and an
# ending with sys.exit(3).
TRAIN = """
import argparse, multiprocessing, pickle, sys

class Settings:  # pickled by reference to __main__
    pass

def square(value):  # run in a spawned worker, which imports this script as __mp_main__
    return value * value

def main():
    import keras, numpy as np, tensorflow as tf

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--out")
    args = parser.parse_args()
    assert pickle.loads(pickle.dumps(Settings())).__class__ is Settings
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print("pool", pool.map(square, [1, 2, 3]), flush=True)
    print("name", __name__, "file", __file__, "argv", sys.argv, flush=True)
    print("path0", sys.path[0], "mp_main", sys.modules["__mp_main__"] is sys.modules["__main__"])
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    callbacks = []
    model.fit(x, y, batch_size=16, epochs=args.epochs, verbose=0, callbacks=callbacks)
    assert callbacks == []
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=2, verbose=0)
    model.predict(x, batch_size=16, verbose=0)
    sys.exit(3)

if __name__ == "__main__":
    main()
"""

# Its own GPUMonitor and TensorBoard (autolog adds nothing, the summary reads that monitor's
# run), then an error of its own.
OWN_MONITOR = """
import sys
import keras, numpy as np
from tfthroughput import GPUMonitor

print(__name__, sys.argv, __file__ == sys.argv[0], __spec__.name, flush=True)

x = np.ones((32, 3), "float32")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, x[:, :1], epochs=1, verbose=0, callbacks=[
    GPUMonitor("own", interval=0.05), keras.callbacks.TensorBoard("own")])

def load_weights():
    raise FileNotFoundError("weights.h5 is not here")

load_weights()
"""

# Ctrl-C during the second epoch of a fit under a MirroredStrategy over two logical CPUs: the
# first epoch's figures are what was measured, written once (one run, not one per replica).
INTERRUPTED = """
import os, signal
import keras, numpy as np, tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

class CtrlC(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        os.kill(os.getpid(), signal.SIGINT)

x = np.ones((32, 3), "float32")
with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(x, x[:, :1], batch_size=8, epochs=50, verbose=0, callbacks=[CtrlC()])
"""


def _summary(stderr: str) -> list[str]:
    """The summary's lines, between its two rules."""
    lines = stderr.splitlines()
    start = lines.index(RULE)
    return lines[start + 1 : lines.index(RULE, start + 1)]


def test_a_script_runs_as_main_with_every_call_monitored_and_keeps_its_exit_code(tmp_path):
    script = write_script(tmp_path, "train.py", TRAIN)
    result = run_command(
        ["--log-dir", "runs", "train.py", "--epochs", "3", "--out", "x"], cwd=tmp_path
    )

    assert result.returncode == 3, result.stderr
    assert result.stdout.splitlines() == [
        "pool [1, 4, 9]",
        f"name __main__ file {tmp_path / 'train.py'} argv "
        "['train.py', '--epochs', '3', '--out', 'x']",
        f"path0 {tmp_path} mp_main True",
    ]
    runs = tmp_path / "runs"
    assert sorted(os.listdir(runs)) == ["fit-1", "fit-2", "predict-1", "report.html"]
    first, second = read_scalars(runs / "fit-1"), read_scalars(runs / "fit-2")
    assert [step for step, _ in first["epoch/examples_per_second"]] == [0, 1, 2]
    assert [step for step, _ in second["epoch/examples_per_second"]] == [0, 1]
    assert round(first["epoch/seconds"][1][1] * first["epoch/examples_per_second"][1][1]) == 64
    assert read_scalars(runs / "predict-1" / "predict")["predict/steps_per_second"]

    summary = _summary(result.stderr)
    assert summary[0] == "tfthroughput: 3 monitored calls"
    assert (
        summary[1].startswith("fit-1: 3 epochs, ")
        and "examples/s, epochs 2+ (range" in (summary[1])
    )
    assert summary[4].startswith("fit-2: 2 epochs, ") and summary[4].endswith(
        "examples/s, epochs 2+"
    )
    assert summary[7].startswith("predict-1: 1 call, ")
    gpu_lines = [line for line in summary if line.startswith("  GPU busy: ")]
    assert len(gpu_lines) == 3 and all("; host CPU: " in line for line in gpu_lines)
    assert sum(line.startswith("  reading: ") for line in summary) == 3
    assert summary[-2:] == ["runs: runs (tensorboard --logdir runs)", "report: runs/report.html"]
    assert script.read_text() == textwrap.dedent(TRAIN)  # the script is not changed


def test_an_error_prints_pythons_traceback_then_the_summary_and_exits_1(tmp_path):
    (tmp_path / "job").mkdir()
    write_script(tmp_path / "job", "__init__.py", "")
    write_script(tmp_path / "job", "__main__.py", OWN_MONITOR)
    result = run_command(["-m", "job", "a", "-b"], cwd=tmp_path)

    assert result.returncode == 1, result.stderr
    main = tmp_path / "job" / "__main__.py"
    assert result.stdout == f"__main__ [{str(main)!r}, 'a', '-b'] True job.__main__\n"
    traceback = result.stderr[result.stderr.index("Traceback (most recent call last):") :]
    assert traceback.splitlines()[1].startswith(f'  File "{tmp_path / "job" / "__main__.py"}"')
    assert "script_runner" not in traceback and "tfthroughput/cli" not in traceback
    error_line = "FileNotFoundError: weights.h5 is not here"
    assert traceback.index(error_line) < traceback.index(RULE)
    summary = _summary(result.stderr)
    assert summary[0] == "tfthroughput: 1 monitored call"
    assert summary[1].startswith(f"{os.path.join('own', 'hardware')} (its own GPUMonitor): 1 epoch")
    assert summary[-2:] == ["runs: own (tensorboard --logdir own)", "report: own/report.html"]
    assert sorted(os.listdir(tmp_path / "own")) == ["hardware", "report.html", "train"]
    assert not (tmp_path / "logs").exists()  # autolog added no monitor of its own


def test_ctrl_c_during_a_distributed_fit_prints_what_was_measured_and_ends_as_python_does(
    tmp_path,
):
    write_script(tmp_path, "long.py", INTERRUPTED)
    process = run_command(
        ["--no-report", "long.py"], cwd=tmp_path, popen=True, stderr=subprocess.PIPE
    )
    try:
        _, stderr = process.communicate(timeout=300)
    finally:
        process.kill()

    assert process.returncode == -signal.SIGINT, stderr
    assert "KeyboardInterrupt" in stderr
    assert "tfthroughput/" not in stderr.split("Traceback")[-1].split(RULE)[0]  # no runner frame
    summary = _summary(stderr)
    assert summary[0] == "tfthroughput: 1 monitored call"
    assert summary[1].startswith("fit-1: 1 epoch, ")
    runs = tmp_path / "logs" / "tfthroughput"
    assert os.listdir(runs) == ["fit-1"]
    scalars = read_scalars(runs / "fit-1")
    assert [step for step, _ in scalars["epoch/seconds"]] == [0]
    # Four global batches of 8 (two replicas of 4): every example counted once.
    assert round(scalars["epoch/seconds"][0][1] * scalars["epoch/examples_per_second"][0][1]) == 32
    assert not (tmp_path / "logs" / "tfthroughput" / "report.html").exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["missing.py"], "tfthroughput run: error: SCRIPT: no such file: 'missing.py'"),
        (["-m", "no_such.module"], "tfthroughput run: error: -m: no module named 'no_such.module'"),
        ([], "tfthroughput run: error: SCRIPT: missing. Received: nothing to run"),
        (
            ["--sink", "kafka", "train.py"],
            "tfthroughput run: error: --sink must be mlflow or prometheus[:PORT]. "
            "Received: 'kafka'",
        ),
        (
            ["--baseline", "nowhere", "--fail-below", "0.9", "train.py"],
            "tfthroughput run: error: --baseline has no monitored run (no such folder: "
            "'nowhere'). Received: 'nowhere'",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, args, line):
    result = run_command(args, cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (2, [line], "")
    assert os.listdir(tmp_path) == []
