from __future__ import annotations

import os
import warnings

import keras
import pytest
from events import event_files, read_scalars
from fakes import FakeSource
from fits import BATCH_SIZE, STEPS_PER_EPOCH, RaiseDuringEpoch, data, fit, tiny_model

import tfthroughput
from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.monitor import MonitoredCall, autolog, autologging, keras_patch, monitored_calls

METHODS = ("fit", "evaluate", "predict")


def _one_gpu():
    return [FakeSource("gpu0", {"utilization_percent": 40.0})]


@pytest.fixture
def autologged(tmp_path):
    """autolog on, into tmp_path/logs, with a fake GPU; off again after the test."""
    before = {name: keras.Model.__dict__.get(name) for name in METHODS}
    log_dir = tmp_path / "logs"
    autolog(log_dir=log_dir, interval=0.05, sources=_one_gpu)
    yield log_dir
    autolog(disable=True)
    assert {name: keras.Model.__dict__.get(name) for name in METHODS} == before


def _runs(log_dir) -> list[str]:
    return sorted(
        os.path.relpath(folder, log_dir)
        for folder, _, files in os.walk(log_dir)
        if any(file.startswith("events.out.tfevents") for file in files)
    )


def test_each_call_gets_its_own_named_run_and_validation_is_not_a_second_call(autologged):
    model = tiny_model()
    x, y = data()
    callbacks = []
    fit(model, callbacks, epochs=2, validation_data=(x, y))
    fit(model, callbacks, epochs=1)
    model.evaluate(x, y, batch_size=BATCH_SIZE, verbose=0)
    model.predict(x, batch_size=BATCH_SIZE, verbose=0)

    assert callbacks == []  # the user's list is copied, never changed
    assert _runs(autologged) == [
        "evaluate-1/evaluate",
        "fit-1",
        "fit-2",
        "predict-1/predict",
    ]
    first = read_scalars(autologged / "fit-1")
    assert [step for step, _ in first["gpu0/utilization_percent/mean"]] == [0, 1]
    assert [value for _, value in first["gpu0/utilization_percent/mean"]] == [40.0, 40.0]
    assert [value for _, value in first["epoch/steps_per_second"]] and all(
        value > 0 for _, value in first["epoch/steps_per_second"]
    )
    assert "validation/gpu0/utilization_percent/mean" in first  # measured by fit-1's monitor
    evaluate = read_scalars(autologged / "evaluate-1" / "evaluate")
    assert evaluate["evaluate/gpu0/utilization_percent/mean"] == [(0, 40.0)]
    assert [(call.kind, call.name) for call in monitored_calls()] == [
        ("fit", "fit-1"),
        ("fit", "fit-2"),
        ("evaluate", "evaluate-1"),
        ("predict", "predict-1"),
    ]
    assert monitored_calls()[2].run_dir == os.path.join(autologged, "evaluate-1", "evaluate")


def test_a_models_predict_calls_in_a_loop_are_one_run_with_a_step_per_call(autologged):
    model, other = tiny_model(), tiny_model()
    x, _ = data()
    for _ in range(3):
        model.predict(x, batch_size=BATCH_SIZE, verbose=0)
    other.predict(x, batch_size=BATCH_SIZE, verbose=0)  # another model: a run of its own
    model.evaluate(x, x[:, :1], batch_size=BATCH_SIZE, verbose=0)  # another kind: the same

    assert _runs(autologged) == ["evaluate-1/evaluate", "predict-1/predict", "predict-2/predict"]
    calls = read_scalars(autologged / "predict-1" / "predict")["predict/seconds"]
    assert [step for step, _ in calls] == [0, 1, 2]
    assert len(event_files(autologged / "predict-1" / "predict")) == 1
    assert read_scalars(autologged / "predict-2" / "predict")["predict/seconds"][0][0] == 0
    assert [(call.kind, call.name) for call in monitored_calls()] == [
        ("predict", "predict-1"),
        ("predict", "predict-2"),
        ("evaluate", "evaluate-1"),
    ]
    # New settings: the model's next call gets a monitor made with them, in a run of its own.
    tfthroughput.autolog(log_dir=autologged, interval=0.05, sources=_one_gpu)
    model.predict(x, batch_size=BATCH_SIZE, verbose=0)
    assert "predict-3/predict" in _runs(autologged)


def test_a_call_with_its_own_monitor_is_left_as_it_is(autologged, tmp_path):
    own = GPUMonitor(tmp_path / "own", interval=0.05, sources=_one_gpu)
    fit(tiny_model(), [own], epochs=1)
    assert not autologged.exists()
    assert event_files(tmp_path / "own" / "hardware")
    fit(tiny_model(), [own], epochs=1)  # the same monitor again: the same run, listed once
    assert monitored_calls() == (MonitoredCall("fit", "hardware", str(tmp_path / "own"), True),)


@pytest.mark.tensorflow
def test_a_tensorboard_callbacks_log_dir_gets_the_run_beside_it(autologged, tmp_path):
    board = keras.callbacks.TensorBoard(log_dir=str(tmp_path / "board"))
    fit(tiny_model(), [board], epochs=1)
    assert sorted(os.listdir(tmp_path / "board")) == ["fit-1", "train"]
    assert "gpu0/utilization_percent/mean" in read_scalars(tmp_path / "board" / "fit-1")
    assert not autologged.exists()


def test_a_run_folder_left_by_an_earlier_process_is_not_written_again(autologged):
    os.makedirs(autologged / "fit-1")
    fit(tiny_model(), [], epochs=1)
    assert _runs(autologged) == ["fit-2"]


def test_on_a_cluster_every_worker_names_the_same_call_alike(autologged, monkeypatch):
    """Workers share the folder: the one that starts second must not skip to fit-2."""
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1", "b:2"]}}')
    os.makedirs(autologged / "fit-1")  # as the other worker made it a moment before
    monitor = autologging._settings.monitor_for("fit", [], tiny_model())
    assert (monitor.log_dir, monitor.run_name) == (str(autologged), "fit-1")


def test_a_subclass_whose_fit_calls_super_fit_gets_one_run(autologged):
    class Trained(keras.Sequential):
        def fit(self, *args, **kwargs):
            return super().fit(*args, **kwargs)

    model = Trained([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    fit(model, [], epochs=1)
    assert _runs(autologged) == ["fit-1"]


def test_autolog_twice_patches_once_and_disable_restores_the_same_objects(tmp_path):
    before = {name: getattr(keras.Model, name) for name in METHODS}
    inherited = {name: name not in keras.Model.__dict__ for name in METHODS}
    tfthroughput.autolog(log_dir=tmp_path)
    patched = {name: keras.Model.__dict__[name] for name in METHODS}
    tfthroughput.autolog(log_dir=tmp_path, interval=0.5)
    assert {name: keras.Model.__dict__[name] for name in METHODS} == patched
    assert keras_patch.is_patched()
    tfthroughput.autolog(disable=True)
    assert not keras_patch.is_patched()
    for name in METHODS:
        assert getattr(keras.Model, name) is before[name]
        assert (name not in keras.Model.__dict__) == inherited[name]
    tfthroughput.autolog(disable=True)  # disabling what is off changes nothing
    assert all(getattr(keras.Model, name) is before[name] for name in METHODS)


def test_a_fault_in_the_patch_is_one_warning_and_the_call_runs(tmp_path):
    def broken(kind, callbacks, model):
        raise RuntimeError("cannot build a monitor")

    keras_patch.patch(broken)
    try:
        model = tiny_model()
        with pytest.warns(MonitoringWarning, match="could not add a GPUMonitor to fit") as caught:
            history = fit(model, [], epochs=2)
            fit(model, [], epochs=1)
        assert len(history.history["loss"]) == 2
        assert len([w for w in caught if "could not add" in str(w.message)]) == 1
    finally:
        keras_patch.unpatch()


def test_the_users_errors_reach_them_unchanged(autologged):
    model = tiny_model()
    x, y = data()
    raised = ValueError("the user's own failure")
    with pytest.raises(ValueError) as error:
        fit(model, [RaiseDuringEpoch(0, 1, raised)], epochs=1)
    assert error.value is raised
    with warnings.catch_warnings():
        warnings.simplefilter("error", MonitoringWarning)  # not the patch's fault: no warning
        with pytest.raises(TypeError, match="epochz"):
            model.fit(x, y, epochz=2, verbose=0)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"interval": 0}, ValueError, "Received: interval=0"),
        ({"run_name": "mine"}, TypeError, "Received: run_name='mine'"),
        ({"disable": "yes"}, TypeError, "Received: disable='yes'"),
    ],
)
def test_bad_options_fail_before_anything_is_patched(tmp_path, options, error, message):
    with pytest.raises(error, match=message):
        autolog(log_dir=tmp_path, **options)
    assert not keras_patch.is_patched()


def test_steps_are_counted_per_call(autologged):
    fit(tiny_model(), [], epochs=1)
    scalars = read_scalars(autologged / "fit-1")
    seconds = scalars["epoch/seconds"][0][1]
    steps_per_second = scalars["epoch/steps_per_second"][0][1]
    assert round(seconds * steps_per_second) == STEPS_PER_EPOCH


@pytest.mark.tensorflow  # KerasTuner's own imports
def test_each_kerastuner_trial_gets_a_run_of_its_own(autologged, tmp_path):
    keras_tuner = pytest.importorskip("keras_tuner")

    def build(hp):
        model = keras.Sequential(
            [
                keras.Input((3,)),
                keras.layers.Dense(hp.Choice("units", [1, 2, 3])),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer="sgd", loss="mse")
        return model

    tuner = keras_tuner.RandomSearch(
        build, objective="loss", max_trials=3, directory=tmp_path / "tuner", seed=0
    )
    x, y = data()
    callbacks = [keras.callbacks.TerminateOnNaN()]  # deep-copied by KerasTuner for each trial
    tuner.search(x, y, batch_size=BATCH_SIZE, epochs=1, verbose=0, callbacks=callbacks)
    assert _runs(autologged) == ["fit-1", "fit-2", "fit-3"]
    assert len(callbacks) == 1


def test_a_fit_left_by_an_exception_is_written_out_before_its_sampler_notices(tmp_path):
    # A sampler this slow notices the fit is gone only after the test: only
    # finish_left_calls can have written the epoch cut short.
    autolog(log_dir=tmp_path, interval=600, sources=_one_gpu)
    try:
        with pytest.raises(RuntimeError, match="stopped"):
            fit(tiny_model(), [RaiseDuringEpoch(1, 1, RuntimeError("stopped"))], epochs=3)
        autologging.finish_left_calls()
        scalars = read_scalars(tmp_path / "fit-1")
    finally:
        autolog(disable=True)
    assert [step for step, _ in scalars["epoch/seconds"]] == [0]
    # The window where the fit stopped: the second epoch's first two steps.
    assert [step for step, _ in scalars["window/seconds"]] == [STEPS_PER_EPOCH + 2]


class FinishLeftCalls(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        autologging.finish_left_calls()


def test_a_fit_still_running_is_not_written_out(autologged):
    fit(tiny_model(), [FinishLeftCalls()], epochs=2)
    scalars = read_scalars(autologged / "fit-1")
    assert [step for step, _ in scalars["epoch/seconds"]] == [0, 1]
