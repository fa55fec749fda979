"""`GPUMonitor`'s lifecycle: a value until `fit` starts it, copyable (KerasTuner), released after
an interrupted `fit`, and usable by hand with `close()` or as a context manager."""

from __future__ import annotations

import copy
import gc
import threading
import weakref

import keras
import numpy as np
import pytest
from events import event_files, read_scalars
from fakes import FakeSource
from fits import (
    BATCH_SIZE,
    EpochDial,
    RaiseDuringEpoch,
    fake_gpus,
    fit,
    sampler_threads,
    tiny_model,
    wait_for_no_sampler_thread,
)

from tfthroughput import GPUMonitor, MonitoringWarning

SETTINGS = (
    "log_dir",
    "interval",
    "hardware_metrics",
    "statistics",
    "batch_size",
    "input_wait",
    "update_logs",
    "run_name",
)


def assert_unstarted_copy(clone: GPUMonitor, original: GPUMonitor) -> None:
    assert type(clone) is GPUMonitor and clone is not original
    for name in SETTINGS:
        assert getattr(clone, name) == getattr(original, name), name
    assert clone._source_factory is original._source_factory  # functions are shared by deepcopy
    assert clone._training is None
    assert clone.model is None and clone.params is None


def live_objects(monitor: GPUMonitor) -> list[object]:
    lock_types = (type(threading.Lock()), type(threading.RLock()))
    return [
        value
        for value in vars(monitor).values()
        if isinstance(value, (*lock_types, threading.Thread)) or hasattr(value, "sampler")
    ]


def test_nothing_live_before_fit_and_deepcopy_gives_an_unstarted_monitor(tmp_path):
    dial = EpochDial()
    monitor = GPUMonitor(
        tmp_path,
        interval=0.05,
        hardware_metrics=["utilization_percent"],
        statistics=["mean"],
        batch_size=BATCH_SIZE,
        input_wait=False,
        update_logs=True,
        run_name="hw",
        sources=fake_gpus(dial),
    )
    assert live_objects(monitor) == []
    assert_unstarted_copy(copy.deepcopy(monitor), monitor)

    copies_during_fit = []

    class CopyMidFit(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            copies_during_fit.append(copy.deepcopy(monitor))

    fit(tiny_model(), [dial, monitor, CopyMidFit()], epochs=1)
    assert_unstarted_copy(copies_during_fit[0], monitor)
    after_fit = copy.deepcopy(monitor)
    assert_unstarted_copy(after_fit, monitor)
    assert_unstarted_copy(copy.copy(monitor), monitor)

    # The copy works on its own: a second run in the same folder.
    fit(tiny_model(), [dial, after_fit], epochs=1)
    first, second = event_files(tmp_path / "hw")
    assert read_scalars(first)["gpu0/utilization_percent/mean"] == [(0, 10.0)]
    assert read_scalars(second)["gpu0/utilization_percent/mean"] == [(0, 10.0)]


def test_keras_tuner_random_search_copies_the_monitor_for_each_trial(tmp_path):
    import keras_tuner

    monitor = GPUMonitor(
        tmp_path / "logs",
        interval=0.05,
        sources=lambda: [FakeSource("gpu0", {"utilization_percent": 42.0})],
    )
    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")

    def build(hp):
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(hp.Int("units", 1, 4)), keras.layers.Dense(1)]
        )
        model.compile(optimizer="sgd", loss="mse")
        return model

    tuner = keras_tuner.RandomSearch(
        build,
        objective="loss",
        max_trials=2,
        seed=0,
        directory=str(tmp_path / "tuner"),
        project_name="monitor",
    )
    tuner.search(x, x.sum(axis=1), batch_size=8, epochs=2, callbacks=[monitor], verbose=0)

    assert len(tuner.oracle.trials) == 2
    runs = event_files(tmp_path / "logs" / "hardware")
    assert len(runs) == 2  # one per trial, each from its own copy
    for run in runs:
        assert read_scalars(run)["gpu0/utilization_percent/mean"] == [(0, 42.0), (1, 42.0)]
    assert monitor._training is None and monitor.model is None  # the original never ran
    wait_for_no_sampler_thread()
    assert sampler_threads() == []


def test_an_interrupted_fit_leaves_nothing_of_fit_alive_and_releases_the_sampler(tmp_path):
    dial = EpochDial()
    made: list[FakeSource] = []

    def sources():
        made.extend(fake_gpus(dial)())
        return list(made)

    monitor = GPUMonitor(tmp_path, interval=0.05, sources=sources)
    model = tiny_model()
    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    training_data = [weakref.ref(x), weakref.ref(y)]
    try:
        model.fit(
            x,
            y,
            batch_size=8,
            epochs=3,
            verbose=0,
            callbacks=[dial, monitor, RaiseDuringEpoch(1, 2, RuntimeError("step failed"))],
        )
    except RuntimeError:
        pass  # leaving the except block drops the traceback and with it fit's frame
    del x, y
    wait_for_no_sampler_thread()
    assert sampler_threads() == []
    assert all(source.closed for source in made)
    released = [weakref.ref(source) for source in made]
    made.clear()
    gc.collect()
    assert [ref() for ref in training_data] == [None, None]  # collectable: nothing pins them
    assert [ref() for ref in released] == [None] * 3  # sampler and sources let go
    scalars = read_scalars(tmp_path / "hardware")
    # Epoch 1, cut short, is a window at the step where it stopped (step 7).
    assert scalars["gpu0/utilization_percent/mean"] == [(0, 10.0)]
    assert scalars["window/gpu0/utilization_percent/mean"] == [(7, 20.0)]


def drive_by_hand(monitor: GPUMonitor, dial: EpochDial, epochs: int) -> None:
    """A hand-written loop: `epochs` epochs ended, then one more begun and left open."""
    monitor.on_train_begin()
    for epoch in range(epochs + 1):
        dial.on_epoch_begin(epoch)
        monitor.on_epoch_begin(epoch)
        monitor._training.sampler.sample_once()  # at least one sample, however slow the thread
        if epoch < epochs:
            monitor.on_epoch_end(epoch, {})


def test_hooks_driven_by_hand_warn_that_no_fit_is_watched(tmp_path):
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(dial))
    with pytest.warns(MonitoringWarning, match="found no Keras `fit`") as caught:
        drive_by_hand(monitor, dial, epochs=0)
    assert caught[0].filename == __file__  # points at the caller of on_train_begin
    monitor.close()
    monitor.close()  # idempotent
    assert sampler_threads() == []
    assert read_scalars(tmp_path / "hardware")["gpu0/utilization_percent/mean"] == [(0, 10.0)]


def test_as_a_context_manager_it_is_quiet_and_closes_what_the_loop_left_open(tmp_path, recwarn):
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(dial))
    with monitor as entered:
        assert entered is monitor
        drive_by_hand(monitor, dial, epochs=1)
        assert len(sampler_threads()) == 1
    assert sampler_threads() == []
    assert [w for w in recwarn if issubclass(w.category, MonitoringWarning)] == []
    # Epoch 0 was ended by the loop; epoch 1 was cut short and closing wrote it.
    scalars = read_scalars(tmp_path / "hardware")
    assert scalars["gpu0/utilization_percent/mean"] == [(0, 10.0), (1, 20.0)]
    assert [step for step, _ in scalars["epoch/seconds"]] == [0]


@pytest.mark.tensorflow
def test_a_gan_with_optimizers_of_its_own_writes_every_window_on_one_step_axis(tmp_path):
    # `super().compile()` leaves `model.optimizer` a default that never steps: read by it,
    # every epoch's windows restarted at step 0 and only the first epoch's were written.
    from user_models import build_gan, unlabeled_dataset

    model = build_gan()
    monitor = GPUMonitor(log_dir=tmp_path, interval=0.05, update_freq=5, sources=list)
    data = unlabeled_dataset(examples=160, batch=16)  # 10 batches an epoch
    model.fit(data, epochs=3, verbose=0, callbacks=[monitor])
    model.fit(data, epochs=1, verbose=0, callbacks=[monitor])  # the axis goes on

    scalars = read_scalars(tmp_path / "hardware")
    windows = scalars["window/examples_per_second"]
    assert [step for step, _ in windows] == list(range(5, 41, 5))
    seconds = dict(scalars["window/seconds"])
    assert sum(rate * seconds[step] for step, rate in windows) == pytest.approx(4 * 160)
    assert [step for step, _ in scalars["epoch/steps_per_second"]] == [0, 1, 2, 0]
