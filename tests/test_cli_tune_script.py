"""`tfthroughput tune SCRIPT`: users' unchanged scripts, run as real subprocesses up to the call
that is tuned; what is printed, the JSON written and the exit codes asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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

# A model with its own train_step (a reconstruction loss on x alone, its own loss tracker), as
# Keras's guide to customizing fit writes one, fed an unlabeled PyDataset.
OWN_STEP_ON_A_PY_DATASET = """
import keras, numpy as np, tensorflow as tf

class Reconstruction(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tracker = keras.metrics.Mean(name="loss")

    def train_step(self, x):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(x - self(x, training=True)))
        gradients = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply(gradients, self.trainable_weights)
        self.tracker.update_state(loss)
        return {"loss": self.tracker.result()}

    @property
    def metrics(self):
        return [self.tracker]


class Batches(keras.utils.PyDataset):
    def __init__(self, x, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.batch_size = x, batch_size

    def __len__(self):
        return len(self.x) // self.batch_size

    def __getitem__(self, index):
        return self.x[index * self.batch_size : (index + 1) * self.batch_size]


keras.utils.set_random_seed(2)
inputs = keras.Input((4,))
model = Reconstruction(inputs, keras.layers.Dense(4)(keras.layers.Dense(2)(inputs)))
model.compile(keras.optimizers.Adam(1e-3))
model.fit(Batches(np.random.rand(64, 4).astype("float32"), 8), epochs=2, verbose=0)
print("trained", flush=True)
"""

# Built and compiled in a MirroredStrategy's scope (two logical CPUs) with a loss-scaling
# optimizer, and fitted outside it, as the tf.distribute guide's Keras examples do.
MIRRORED_LOSS_SCALED = """
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
keras.utils.set_random_seed(3)
x = np.random.rand(64, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01)), "mse")
model.fit(x, y, batch_size=16, epochs=1, verbose=0)
print("trained", flush=True)
"""

# Seeded, shuffled by fit (its default), then an error of the script's own. Run alone, it takes
# the setup to train with from SETUP (what tune --apply chose), so both runs can be compared.
SEEDED_THEN_RAISES = """
import json, os
import keras, numpy as np

setup = json.loads(os.environ.get("SETUP", "{}"))
keras.utils.set_random_seed(4)
x = np.random.rand(256, 8).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
model.compile(
    keras.optimizers.SGD(0.01),
    "mse",
    steps_per_execution=setup.get("steps_per_execution", 1),
    jit_compile=setup.get("jit_compile", False),
)
if "pipeline_kwargs" in setup:
    import tfthroughput

    data = {"x": tfthroughput.build_pipeline((x, y), **setup["pipeline_kwargs"]),
            "steps_per_epoch": setup["steps_per_epoch"]}
else:
    data = {"x": x, "y": y, "batch_size": setup.get("batch_size", 16)}
history = model.fit(**data, epochs=2, verbose=0)
print("final loss", repr(history.history["loss"][-1]), flush=True)
print("next numpy draw", repr(np.random.rand()), flush=True)
raise ValueError("the script's own error, after its fit")
"""

# A subclassed model whose get_config returns its constructor's arguments: rebuilt from it.
SUBCLASS_WITH_CONFIG = """
import keras, numpy as np

class Scaled(keras.Model):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = keras.layers.Dense(units, activation="relu")
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(x))

    def get_config(self):
        return {**super().get_config(), "units": self.units}

model = Scaled(8)
model.compile(keras.optimizers.SGD(0.01), "mse")
x = np.random.rand(64, 4).astype("float32")
model.fit(x, x.sum(axis=1, keepdims=True), batch_size=16, verbose=0)
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


def _written(path):
    return json.loads(path.read_text())


def _tuned_at_first_fit(source, folder):
    """``tfthroughput tune`` on ``source`` as ``train.py``, checked to have tuned its first fit
    and stopped there; what it printed and the JSON it wrote."""
    write_script(folder, "train.py", source)
    out = folder / "tune.json"
    result = _tune([*QUICK, "--json", str(out), "train.py"], folder)
    assert result.returncode == 0, result.stderr
    assert "trained" not in result.stdout and "Traceback" not in result.stderr
    written = _written(out)
    assert written["trials"][0]["status"] == "baseline"
    return result, written


def test_an_own_train_step_on_an_unlabeled_py_dataset_is_rebuilt_and_tuned(tmp_path):
    result, written = _tuned_at_first_fit(OWN_STEP_ON_A_PY_DATASET, tmp_path)

    printed = result.stdout.splitlines()
    assert printed[0].startswith("setting ")
    assert printed[1].startswith("as given: steps_per_execution=1")
    # The rebuilt copy trained on the unlabeled batches through its own train_step (a plain
    # Functional copy, compiled without a loss, could not), reading the PyDataset as given.
    assert written["trials"][0]["warmup_seconds"] > 0
    assert any(note.startswith("input side: a PyDataset") for note in written["notes"])


def test_a_subclassed_model_with_a_config_is_rebuilt_from_it_and_tuned(tmp_path):
    result, written = _tuned_at_first_fit(SUBCLASS_WITH_CONFIG, tmp_path)

    # Its copies trained (the check build and the baseline's warm-up); without get_config
    # the same script is one line and exit status 2 (below).
    assert written["trials"][0]["warmup_seconds"] > 0
    assert "cannot rebuild" not in result.stderr


def test_a_model_built_under_mirrored_strategy_with_loss_scaling_is_tuned_under_it(tmp_path):
    result, written = _tuned_at_first_fit(MIRRORED_LOSS_SCALED, tmp_path)

    # Every rebuilt copy trained under the script's strategy, on both replicas.
    distribution = written["distribution"]
    assert (distribution["strategy"], distribution["replicas"]) == ("MirroredStrategy", 2)
    assert distribution["baseline_batch_size"] == 16
    assert any(line.startswith("strategy: MirroredStrategy") for line in result.stdout.split("\n"))


def test_apply_leaves_the_scripts_training_as_the_chosen_setup_alone_gives_it(tmp_path):
    write_script(tmp_path, "train.py", SEEDED_THEN_RAISES)
    out = tmp_path / "tune.json"
    args = ["--apply", *QUICK, "--json", str(out), "--log-dir", "runs", "train.py"]
    applied = _tune(args, tmp_path)

    # The script's own error ends it as Python would: its traceback and exit status 1, with
    # the summary of what was monitored still printed.
    assert applied.returncode == 1
    assert "ValueError: the script's own error, after its fit" in applied.stderr
    assert "tfthroughput: 1 monitored call" in applied.stderr
    # The same script run alone (`python train.py`) with the setup tune chose, as --apply put
    # it on the script's model and call: the same loss to the last digit and the same next
    # NumPy draw, so the search trained nothing the script sees and left its random state.
    written = _written(out)
    setup = {k: written["chosen"][k] for k in ("steps_per_execution", "jit_compile", "batch_size")}
    if written["pipeline_kwargs"] is not None:  # built for the call as --apply builds it
        from tfthroughput.tuning.script.call_apply import call_pipeline

        call = {"x": np.zeros((256, 8)), "batch_size": 16}
        setup["pipeline_kwargs"], setup["steps_per_epoch"] = call_pipeline(
            written["pipeline_kwargs"], call
        )
    alone = _python(tmp_path / "train.py", tmp_path, SETUP=json.dumps(setup))
    assert alone.returncode == 1 and "ValueError: the script's own error" in alone.stderr
    ran = [line for line in applied.stdout.splitlines() if line.startswith(("final", "next"))]
    assert len(ran) == 2 and ran == alone.stdout.splitlines()


def _python(script, cwd, **env):
    """``python SCRIPT`` with ``env`` added, as a user runs it."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    command = [sys.executable, str(script)]
    return subprocess.run(
        command, cwd=cwd, env={**environment, **env}, capture_output=True, text=True, timeout=300
    )


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
    from tfthroughput.tuning.script.captured_call import CannotTune, tune_data

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

    assert _lines_to_change(result, "train.py:12", "fit", {}).splitlines() == [
        "Lines to change in the script:",
        "  before the model is built: tfthroughput.mixed_precision('mixed_bfloat16')",
        "  model.compile(..., steps_per_execution=32, jit_compile=False)",
        "  the fit call at train.py:12: fit(..., batch_size=64)",
    ]


@pytest.mark.parametrize(
    "x, steps_per_epoch, repeat, added",
    [
        (np.zeros((512, 16)), None, True, " with steps_per_epoch=16"),
        (np.zeros((512, 16)), 8, True, ""),
        (None, None, False, ""),  # data whose length is not known: a pipeline that ends
    ],
)
def test_the_rebuilt_pipeline_line_gives_every_epoch_an_end(x, steps_per_epoch, repeat, added):
    # A call without steps_per_epoch ends each epoch at the data's end: given a repeating
    # pipeline alone, its first epoch would never end. The line says what --apply does.
    from tfthroughput.cli.tune_script import _lines_to_change
    from tfthroughput.tuning import TuneResult, TuneSetup, TuneTrial

    given = TuneSetup(1, False, "float32", batch_size=32)
    chosen = given.with_(steps_per_execution=16, pipeline=True)
    trials = (
        TuneTrial(given, "as given", "baseline", 100.0, 1.0),
        TuneTrial(chosen, "faster", "faster", 400.0, 4.0, 3.5, 4.3, 0.1),
    )
    built = {"batch_size": 32, "cache": True, "deterministic": True, "repeat": True}
    result = TuneResult(given, chosen, trials, 10.0, 60.0, pipeline_kwargs=built)

    arguments = {"x": x, "steps_per_epoch": steps_per_epoch}
    assert _lines_to_change(result, "train.py:11", "fit", arguments).splitlines()[-1] == (
        "  data = tfthroughput.build_pipeline(data, batch_size=32, cache=True, "
        f"deterministic=True, repeat={repeat}), passed to the fit call at train.py:11{added}"
    )
