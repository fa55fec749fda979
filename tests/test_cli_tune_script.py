"""`tfthroughput tune SCRIPT`: users' unchanged scripts, run as real subprocesses up to the call
that is tuned; what is printed, the JSON written and the exit codes asserted."""

from __future__ import annotations

import json

import numpy as np
import pytest
from script_runs import run_command, write_script

PROG = "tfthroughput tune"
# Short searches: these tests check what is taken and printed, not what is chosen.
QUICK = ["--budget", "2", "--steps", "4"]

# A first fit on arrays, a second on tf.data: --call 2 takes the second; nothing after it runs.
TWO_FITS = """
import sys
import keras, numpy as np, tensorflow as tf

keras.utils.set_random_seed(1)
x = np.random.rand(64, 4).astype("float32")
y = np.random.rand(64, 1).astype("float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
model.compile(keras.optimizers.SGD(0.01), "mse", metrics=[keras.metrics.MeanAbsoluteError()])
print("argv", sys.argv[1:], flush=True)
model.fit(x, y, batch_size=16, epochs=1, verbose=0)
print("first fit done", flush=True)
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), epochs=3, verbose=0)
print("second fit done", flush=True)
"""

PREDICT = """
import keras, numpy as np

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.predict(np.zeros((64, 4), "float32"), batch_size=16, verbose=0)
print("predicted", flush=True)
"""

UNREBUILDABLE = """
import keras, numpy as np

class Scorer(keras.Model):
    def __init__(self, lookup):  # a Python object the config cannot carry
        super().__init__()
        self.lookup = lookup
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)

model = Scorer(object())
model.compile("sgd", "mse")
model.fit(np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32"), verbose=0)
print("trained", flush=True)
"""

NO_FIT = """
import keras
print("no training here", flush=True)
"""


def _tune(args, cwd):
    return run_command(args, cwd, command_name="tune")


def test_the_nth_fit_is_tuned_on_its_own_data_and_the_script_stops_there(tmp_path):
    write_script(tmp_path, "train.py", TWO_FITS)
    out = tmp_path / "tune.json"
    result = _tune(["--call", "2", *QUICK, "--json", str(out), "train.py", "a"], tmp_path)

    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    assert printed[:2] == ["argv ['a']", "first fit done"]
    assert "second fit done" not in result.stdout  # stopped at the call, nothing trained
    assert printed[2].startswith("setting ")  # tune's table
    assert printed[3].startswith("as given: steps_per_execution=1")
    # The tf.data call's own data: 8 batches of 8 (the first fit's arrays made 4 of 16).
    assert "note: steps_per_execution bounded by the epoch length (8 steps)" in printed
    assert any(line.startswith("chosen: ") for line in printed)
    assert printed[-1].startswith("Lines to change") or "  model.compile(..., " in result.stdout
    written = json.loads(out.read_text())
    assert written["trials"][0]["status"] == "baseline"
    assert "Traceback" not in result.stderr


def test_inference_tunes_the_first_predict(tmp_path):
    write_script(tmp_path, "serve.py", PREDICT)
    result = _tune(["--inference", *QUICK, "serve.py"], tmp_path)

    assert result.returncode == 0, result.stderr
    assert "predicted" not in result.stdout
    assert "batch 16" in result.stdout.splitlines()[1]  # the baseline: predict's own batch
    assert any(line.startswith("chosen: ") for line in result.stdout.splitlines())


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def test_a_model_that_cannot_be_rebuilt_is_one_line_and_exit_2(tmp_path):
    write_script(tmp_path, "train.py", UNREBUILDABLE)
    result = _tune(QUICK + ["train.py"], tmp_path)

    assert result.returncode == 2
    assert "trained" not in result.stdout and "Traceback" not in result.stderr
    line = _last_line(result.stderr)
    assert line.startswith(f"{PROG}: cannot rebuild the model: Scorer (NotImplementedError: ")
    assert "give Scorer a get_config()" in line
    assert line.endswith(
        "call tfthroughput.tune(build_model, data) with a function that builds and compiles it"
    )


def test_a_one_shot_generator_is_refused_with_what_to_pass_instead():
    # In process: the refusal comes before anything is built (a subprocess costs seconds).
    from tfthroughput.tuning.captured_call import CannotTune, tune_data

    batches = (np.zeros((8, 4)) for _ in range(2))
    with pytest.raises(CannotTune) as raised:
        tune_data({"x": batches, "steps_per_epoch": 2}, inference=False)
    assert str(raised.value) == (
        "the call's data is a one-shot generator, which cannot be replayed for every "
        "trial; pass a tf.data.Dataset (tf.data.Dataset.from_generator), a "
        "keras.utils.PyDataset or arrays instead"
    )
    assert tune_data({"x": np.ones((8, 4)), "y": np.ones((8, 1))}, inference=False)[1] == {
        "batch_size": 32
    }


def test_a_script_that_never_calls_fit_says_so(tmp_path):
    write_script(tmp_path, "job.py", NO_FIT)
    result = _tune(QUICK + ["job.py"], tmp_path)

    assert result.returncode == 1
    assert result.stdout == "no training here\n"
    assert _last_line(result.stderr) == (
        f"{PROG}: the script ended before making a fit (exit status 0); nothing to tune"
    )


def test_a_missing_script_is_one_line_and_exit_2(tmp_path):
    result = _tune(["missing.py"], tmp_path)

    assert result.returncode == 2
    assert result.stderr.strip() == f"{PROG}: error: SCRIPT: no such file: 'missing.py'"


def test_apply_tunes_at_the_first_fit_and_the_script_runs_on_through_its_second(tmp_path):
    write_script(tmp_path, "train.py", TWO_FITS)
    result = _tune(["--apply", *QUICK, "--log-dir", "runs", "train.py"], tmp_path)

    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    assert printed[0] == "argv []"
    assert printed[1].startswith("setting ")  # tuned before the first fit trained
    assert any(line.startswith(f"{PROG} --apply: ") for line in printed)
    assert printed[-2:] == ["first fit done", "second fit done"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir()) == [
        "fit-1",
        "fit-2",
    ]
    assert "tfthroughput: 2 monitored calls" in result.stderr  # run's summary


def test_apply_on_a_model_that_cannot_be_rebuilt_runs_the_script_unchanged(tmp_path):
    write_script(tmp_path, "train.py", UNREBUILDABLE)
    result = _tune(["--apply", *QUICK, "--log-dir", "runs", "train.py"], tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout == "trained\n" and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(PROG)]
    assert line.startswith(f"{PROG}: cannot rebuild the model: Scorer (")
    assert line.endswith("; the script runs on unchanged")


def test_the_lines_to_change_name_the_compile_arguments_the_batch_and_the_fit_line():
    from tfthroughput.cli.tune_script import _lines_to_change
    from tfthroughput.tuning import TuneResult, TuneSetup, TuneTrial

    given = TuneSetup(1, False, "float32", batch_size=16)
    chosen = given.with_(steps_per_execution=32, batch_size=64, policy="mixed_bfloat16")
    trials = (
        TuneTrial(given, "as given", "baseline", 100.0, 1.0),
        TuneTrial(chosen, "faster", "faster", 300.0, 3.0, 2.5, 3.5, 0.1),
    )
    result = TuneResult(given, chosen, trials, 10.0, 60.0)

    assert _lines_to_change(result, "train.py:12", "fit").splitlines() == [
        "Lines to change in the script:",
        "  before the model is built: tfthroughput.mixed_precision('mixed_bfloat16')",
        "  model.compile(..., steps_per_execution=32, jit_compile=False)",
        "  the fit call at train.py:12: fit(..., batch_size=64)",
    ]
