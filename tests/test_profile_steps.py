"""ProfileSteps: real CPU traces of real fits, read back through xprof's own converters."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from xprof.convert import raw_to_tool_data

from tfthroughput import MonitoringWarning, ProfileSteps

BATCH = 32


def _model() -> keras.Model:
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)]
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _dataset(batches: int, map_fn=None) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.random((batches * BATCH, 16), dtype=np.float32)
    y = rng.integers(0, 4, batches * BATCH)
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if map_fn is not None:
        dataset = dataset.map(map_fn)
    return dataset.batch(BATCH)


def _fit(model: keras.Model, dataset: tf.data.Dataset, callback, epochs: int = 1, **kwargs):
    return model.fit(
        dataset, epochs=epochs, callbacks=[callback], verbose=0, shuffle=False, **kwargs
    )


def _tool(run_dir, tool: str) -> list[dict]:
    """What TensorBoard's Profile tab shows for ``tool``, from the run's only trace."""
    traces = glob.glob(os.path.join(run_dir, "plugins", "profile", "*", "*.xplane.pb"))
    assert len(traces) == 1, traces
    data, _ = raw_to_tool_data.xspace_to_tool_data(traces, tool, {})
    return json.loads(data)


def _step_rows(tool_data: list[dict]) -> list[dict]:
    """The step-time table (the step-time graph's data): one dict per step."""
    table = tool_data[1]
    ids = [column["id"] for column in table["cols"]]
    return [dict(zip(ids, (cell["v"] for cell in row["c"]), strict=True)) for row in table["rows"]]


def _shown_steps(run_dir) -> list[str]:
    return [row["stepnum"] for row in _step_rows(_tool(run_dir, "overview_page"))]


def test_each_captured_step_is_marked_and_timed_in_the_overview(tmp_path):
    profile = ProfileSteps(tmp_path, step_range=(3, 7))
    _fit(_model(), _dataset(8), profile, epochs=2)

    assert profile.traced_steps == (3, 4, 5, 6, 7)
    overview = _tool(tmp_path / "train", "overview_page")
    steps = _step_rows(overview)
    assert [row["stepnum"] for row in steps] == [f"train {n}" for n in range(3, 8)]
    assert all(row["stepTimeMs"] > 0 for row in steps)
    assert sum(row["infeedTimeMs"] for row in steps) > 0
    assert float(overview[1]["p"]["steptime_ms_average"]) > 0
    assert "No step marker" not in json.dumps(overview)


def test_steps_count_optimizer_steps_across_epochs_and_fits(tmp_path):
    model = _model()
    first = ProfileSteps(tmp_path / "first", step_range=(4, 9))
    _fit(model, _dataset(6), first, epochs=2, validation_data=_dataset(2))  # steps 1-12
    # Six steps, across the epoch boundary and its validation; xprof leaves out the first and
    # the last.
    assert first.traced_steps == (4, 5, 6, 7, 8, 9)
    assert _shown_steps(tmp_path / "first/train") == ["train 5", "train 6", "train 7", "train 8"]

    resumed = ProfileSteps(tmp_path / "resumed", step_range=(14, 15))
    _fit(model, _dataset(6), resumed)  # steps 13-18
    assert resumed.traced_steps == (14, 15)
    assert _shown_steps(tmp_path / "resumed/train") == ["train 14", "train 15"]


def test_slow_input_map_is_attributed_to_input(tmp_path):
    def slow_decode(x, y):
        x = tf.py_function(lambda t: (time.sleep(0.003), t)[1], [x], tf.float32)
        x.set_shape([16])
        return x, y

    profile = ProfileSteps(tmp_path, step_range=(2, 5))
    _fit(_model(), _dataset(6, slow_decode), profile)

    analysis = _tool(tmp_path / "train", "input_pipeline_analyzer")
    steps = _step_rows(analysis)
    assert len(steps) == 4
    input_ms = sum(row["infeedTimeMs"] for row in steps)
    input_share = input_ms / sum(row["stepTimeMs"] for row in steps)
    assert input_share > 0.8  # 32 x 3 ms of sleep against a ~2 ms step
    assert "input-bound" in analysis[1]["p"]["input_conclusion"]


def test_keras_tensorboard_profile_batch_writes_no_step_markers(tmp_path):
    """Pins the README's reason for ProfileSteps: Keras 3's own trace has no step time."""
    tensorboard = keras.callbacks.TensorBoard(tmp_path, profile_batch=(3, 7))
    _fit(_model(), _dataset(8), tensorboard)

    overview = _tool(tmp_path / "train", "overview_page")
    assert _step_rows(overview) == []
    assert overview[1]["p"]["steptime_ms_average"] == "0.0"
    assert "No step marker observed" in json.dumps(overview)


def test_keeps_asynchronous_dispatch_and_one_marker_per_execution(tmp_path):
    # No on_train_batch_end: Keras dispatches steps asynchronously with this callback on.
    assert ProfileSteps.on_train_batch_end is keras.callbacks.Callback.on_train_batch_end
    model = _model()
    model.compile(
        "sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=2
    )
    profile = ProfileSteps(tmp_path, step_range=(4, 6))
    _fit(model, _dataset(8), profile)
    assert profile.traced_steps == (3, 5)  # the executions holding steps 3-4 and 5-6


def test_a_window_the_fit_never_reaches_warns_and_writes_nothing(tmp_path):
    profile = ProfileSteps(tmp_path, step_range=(50, 60))
    with pytest.warns(MonitoringWarning, match="ran steps 1 to 8 and the window is steps 50"):
        _fit(_model(), _dataset(8), profile)
    assert profile.traced_steps == ()
    assert not (tmp_path / "train" / "plugins").exists()


def test_a_profiler_already_running_is_reported_and_training_goes_on(tmp_path):
    tf.profiler.experimental.start(str(tmp_path / "other"))
    try:
        profile = ProfileSteps(tmp_path, step_range=(2, 3))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            history = _fit(_model(), _dataset(4), profile, epochs=2)
    finally:
        tf.profiler.experimental.stop(save=False)
    assert len(history.history["loss"]) == 2
    messages = [str(w.message) for w in caught if w.category is MonitoringWarning]
    assert len(messages) == 1 and "could not start the profiler" in messages[0]


def test_an_unwritable_log_dir_fails_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    model = _model()
    with pytest.raises(
        ValueError, match="`log_dir` must be a folder this process can create and write to"
    ):
        _fit(model, _dataset(2), ProfileSteps(blocker / "logs", step_range=(1, 1)))
    assert int(model.optimizer.iterations.numpy()) == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"step_range": 5}, TypeError, "`step_range` must be a pair of ints (start, stop)"),
        ({"step_range": (1, 2, 3)}, TypeError, "Received: step_range=(1, 2, 3)"),
        ({"step_range": (1.0, 2)}, TypeError, "Received: step_range=(1.0, 2)"),
        ({"step_range": (True, 2)}, TypeError, "Received: step_range=(True, 2)"),
        ({"step_range": "10,20"}, TypeError, "Received: step_range='10,20'"),
        ({"step_range": (0, 5)}, ValueError, "0 < start <= stop"),
        ({"step_range": (8, 3)}, ValueError, "Received: step_range=(8, 3)"),
        ({"log_dir": 3}, TypeError, "`log_dir` must be a path. Received: log_dir=3"),
        ({"run_name": ""}, ValueError, "`run_name` must be a non-empty folder name"),
        ({"run_name": "a/b"}, ValueError, "Received: run_name='a/b'"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(kwargs, error, message):
    with pytest.raises(error) as raised:
        ProfileSteps(**kwargs)
    assert message in str(raised.value)


def test_another_keras_backend_is_refused_at_construction(monkeypatch):
    # TensorFlow installed but Keras on JAX: TensorFlow's profiler would see none of the steps.
    monkeypatch.setattr(keras.config, "backend", lambda: "jax")
    with pytest.raises(ValueError, match="sees only Keras's TensorFlow backend") as raised:
        ProfileSteps("logs", step_range=(1, 2))
    assert "Received: keras.config.backend()='jax'" in str(raised.value)


def test_missing_profile_plugin_is_a_clear_import_error_at_construction():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["xprof"] = None  # as if tensorboard-plugin-profile were not installed
        sys.modules["tensorboard_plugin_profile"] = None
        from tfthroughput import ProfileSteps
        try:
            ProfileSteps("logs", step_range=(1, 2))
        except ImportError as error:
            print(error)
        """
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "pip install tensorboard-plugin-profile" in result.stdout
