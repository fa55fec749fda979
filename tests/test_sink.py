"""The sink interface: a user's own sink gets exactly what TensorBoard got, a faulty sink is
reported once and never stops training, and bad ``sinks=`` fail early."""

from __future__ import annotations

import copy
import warnings

import pytest
from events import read_scalars
from fits import BATCH_SIZE, STEPS_PER_EPOCH, EpochDial, fake_gpus, fit, tiny_model

from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.sinks import Sink


class Recorder(Sink):
    """A user's sink in a few lines: keeps what it is handed."""

    def __init__(self) -> None:
        self.runs, self.measurements, self.closed = [], [], 0

    def open(self, run):
        self.runs.append(run)

    def write(self, measurement):
        self.measurements.append(measurement)

    def close(self):
        self.closed += 1


class Broken(Sink):
    def write(self, measurement):
        raise OSError("disk full")


def test_a_sink_gets_each_window_and_epoch_exactly_as_tensorboard_wrote_it(tmp_path):
    dial = EpochDial()
    recorder = Recorder()
    monitor = GPUMonitor(
        tmp_path, interval=0.05, update_freq=2, sources=fake_gpus(dial), sinks=[recorder]
    )
    fit(tiny_model(), [dial, monitor], epochs=2)

    assert recorder.closed == 1 and len(recorder.runs) == 1
    run = recorder.runs[0]
    assert (run.run_dir, run.task, run.is_chief, run.batch_size) == (
        monitor.run_dir,
        None,
        True,
        BATCH_SIZE,
    )
    kinds = [(m.kind, m.epoch, m.step, m.steps) for m in recorder.measurements]
    assert kinds == [
        ("window", 0, 2, 2),
        ("window", 0, 4, 2),
        ("epoch", 0, 4, STEPS_PER_EPOCH),
        ("window", 1, 6, 2),
        ("window", 1, 8, 2),
        ("epoch", 1, 8, STEPS_PER_EPOCH),
    ]
    # Every scalar TensorBoard holds, and nothing else, was handed to the sink at its step.
    handed: dict[str, list[tuple[int, float]]] = {}
    for measurement in recorder.measurements:
        for tag, value in measurement.scalars.items():
            handed.setdefault(tag, []).append((measurement.tensorboard_step, value))
    tensorboard = read_scalars(monitor.run_dir)
    assert handed.keys() == tensorboard.keys()
    for tag, points in tensorboard.items():
        assert [(step, pytest.approx(value, rel=1e-6)) for step, value in handed[tag]] == points
    epoch = recorder.measurements[2]
    assert epoch.examples == STEPS_PER_EPOCH * BATCH_SIZE
    assert epoch.figures["examples_per_second"] == epoch.scalars["epoch/examples_per_second"]


def test_a_faulty_sink_is_reported_once_and_training_and_other_sinks_go_on(tmp_path):
    recorder = Recorder()
    monitor = GPUMonitor(
        tmp_path,
        interval=0.05,
        update_freq=2,
        sources=fake_gpus(EpochDial()),
        sinks=[Broken(), recorder],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = fit(tiny_model(), [monitor], epochs=2)
    assert len(history.history["loss"]) == 2
    messages = [str(w.message) for w in caught if issubclass(w.category, MonitoringWarning)]
    assert messages == [
        "GPUMonitor's sink Broken failed to take the window at step 2: OSError('disk full'). "
        "Warned once; later faults are counted.",
        "GPUMonitor's sink Broken failed 5 more time(s) after the first warning in this fit.",
    ]
    assert len(recorder.measurements) == 6
    assert "epoch/seconds" in read_scalars(monitor.run_dir)


def test_a_sink_that_cannot_open_fails_the_fit_before_its_first_step(tmp_path):
    class Unopenable(Recorder):
        def open(self, run):
            raise ValueError("no such server")

    opened = Recorder()
    monitor = GPUMonitor(tmp_path, sources=fake_gpus(EpochDial()), sinks=[opened, Unopenable()])
    with pytest.raises(ValueError, match="no such server"):
        fit(tiny_model(), [monitor], epochs=1)
    assert opened.closed == 1 and opened.measurements == []


@pytest.mark.parametrize(
    ("sinks", "message"),
    [
        (Recorder(), "`sinks` must be a list"),
        ([object()], "lacks open, write, close"),
        (["mlflow"], "lacks open, write, close"),
    ],
)
def test_bad_sinks_fail_when_the_monitor_is_made(sinks, message):
    with pytest.raises(TypeError, match=message):
        GPUMonitor(sinks=sinks)


def test_a_copied_monitor_copies_its_sinks_unstarted():
    recorder = Recorder()
    clone = copy.deepcopy(GPUMonitor(sinks=[recorder]))
    assert len(clone.sinks) == 1 and clone.sinks[0] is not recorder
