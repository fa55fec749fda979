"""An epoch measured phase by phase: a real ``fit`` with validation, on a clock the test moves.

Training steps take 0.25 s each and validation batches 0.5 s each on the monitor's clock; a
fake GPU reads 90 % while training and 10 % while validating. The validation set (64 examples
at batch 8) is larger than the training set (32 at batch 8), as in the fit this was found in,
so any figure that mixes the two is far from the training one.
"""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest
from events import read_layouts, read_scalars
from fakes import FakeClock, FakeSource
from fits import (
    BATCH_SIZE,
    STEPS_PER_EPOCH,
    data,
    sampler_threads,
    tiny_model,
    wait_for_no_sampler_thread,
)

from tfthroughput import GPUMonitor

TRAIN_STEP_SECONDS = 0.25
VALIDATION_BATCH_SECONDS = 0.5
VALIDATION_BATCHES = 8
TRAINING_UTILIZATION, VALIDATION_UTILIZATION = 90.0, 10.0


class Clock(keras.callbacks.Callback):
    """Moves the monitor's clock at each batch's end (listed before the monitor, so a window
    the monitor ends at a batch includes that batch's time)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def on_train_batch_end(self, batch, logs=None):
        self.clock.advance(TRAIN_STEP_SECONDS)

    def on_test_batch_end(self, batch, logs=None):
        self.clock.advance(VALIDATION_BATCH_SECONDS)


class Phase(keras.callbacks.Callback):
    """Tells the fake GPU which phase runs (listed after the monitor, so the monitor's sample
    at each phase boundary reads the phase ending)."""

    utilization = TRAINING_UTILIZATION

    def on_test_begin(self, logs=None):
        self.utilization = VALIDATION_UTILIZATION

    def on_test_end(self, logs=None):
        self.utilization = TRAINING_UTILIZATION


def _validated_fit(log_dir, **monitor_arguments):
    clock = FakeClock()
    phase = Phase()
    monitor = GPUMonitor(
        log_dir,
        interval=3600,  # only the monitor's own reads at the boundaries: no race with them
        clock=clock,
        sources=lambda: [FakeSource("gpu0", lambda _: {"utilization_percent": phase.utilization})],
        **monitor_arguments,
    )
    model = tiny_model()
    x, y = data()
    rng = np.random.default_rng(1)
    x_val = rng.normal(size=(VALIDATION_BATCHES * BATCH_SIZE, 3)).astype("float32")
    history = model.fit(
        x,
        y,
        batch_size=BATCH_SIZE,
        epochs=2,
        validation_data=(x_val, x_val.sum(axis=1, keepdims=True)),
        callbacks=[Clock(clock), monitor, phase],
        verbose=0,
    )
    return model, history


@pytest.fixture(scope="module")
def validated_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("validated")
    model, history = _validated_fit(log_dir, update_logs=True, update_freq=2)
    return log_dir, model, history.history


def test_training_figures_cover_the_training_steps_only(validated_run):
    log_dir, model, _ = validated_run
    scalars = read_scalars(log_dir / "hardware")
    steps = int(model.optimizer.iterations) // 2  # per epoch, from the optimizer
    assert steps == STEPS_PER_EPOCH
    training_seconds = steps * TRAIN_STEP_SECONDS  # 1.0 s; the whole epoch took 5.0 s
    assert scalars["epoch/seconds"] == [(0, training_seconds), (1, training_seconds)]
    assert scalars["epoch/steps_per_second"] == [(0, 4.0), (1, 4.0)]
    assert scalars["epoch/examples_per_second"] == [(0, 32.0), (1, 32.0)]
    # The hardware statistics of the epoch are those of its training steps.
    assert scalars["gpu0/utilization_percent/mean"] == [(0, 90.0), (1, 90.0)]
    validation_seconds = VALIDATION_BATCHES * VALIDATION_BATCH_SECONDS
    assert scalars["epoch/wall_seconds"] == [(0, 5.0), (1, 5.0)]
    assert training_seconds + validation_seconds == 5.0


def test_validation_has_its_own_figures_and_hardware_statistics(validated_run):
    log_dir, _, _ = validated_run
    scalars = read_scalars(log_dir / "hardware")
    assert scalars["validation/seconds"] == [(0, 4.0), (1, 4.0)]
    assert scalars["validation/steps_per_second"] == [(0, 2.0), (1, 2.0)]
    assert scalars["validation/examples_per_second"] == [(0, 16.0), (1, 16.0)]
    assert scalars["validation/gpu0/utilization_percent/mean"] == [(0, 10.0), (1, 10.0)]
    assert scalars["validation/gpu0/utilization_percent/max"] == [(0, 10.0), (1, 10.0)]
    assert scalars["validation/gpu0/samples"] == [(0, 1.0), (1, 1.0)]


def test_windows_cover_training_steps_only(validated_run):
    log_dir, _, _ = validated_run
    scalars = read_scalars(log_dir / "hardware")
    # Every 2 steps; the epoch's last window ends where validation begins, not after it.
    assert scalars["window/seconds"] == [(2, 0.5), (4, 0.5), (6, 0.5), (8, 0.5)]
    assert {value for _, value in scalars["window/gpu0/utilization_percent/mean"]} == {90.0}


def test_logs_get_the_validation_under_kerass_val_prefix(validated_run):
    _, _, history = validated_run
    assert history["seconds"] == [1.0, 1.0]
    assert history["examples_per_second"] == [32.0, 32.0]
    assert history["wall_seconds"] == [5.0, 5.0]
    assert history["gpu0_utilization_percent"] == [90.0, 90.0]
    assert history["val_seconds"] == [4.0, 4.0]
    assert history["val_examples_per_second"] == [16.0, 16.0]
    assert history["val_steps_per_second"] == [2.0, 2.0]
    assert history["val_gpu0_utilization_percent"] == [10.0, 10.0]
    assert "val_loss" in history  # Keras's own validation logs are untouched


def test_the_dashboard_gets_a_validation_category_matching_the_written_tags(validated_run):
    log_dir, _, _ = validated_run
    layout = read_layouts(log_dir / "hardware")[-1]
    (validation,) = [
        c for c in layout.category if c.title == "tfthroughput: validation (per epoch)"
    ]
    tags = read_scalars(log_dir / "hardware")
    for chart in validation.chart:
        (regex,) = chart.multiline.tag
        assert [tag for tag in tags if re.fullmatch(regex, tag)], chart.title
    charts = {chart.title: chart.multiline.tag[0] for c in layout.category for chart in c.chart}
    assert charts["training time [s]"] == r"^epoch/seconds$"
    assert charts["epoch wall time, validation included [s]"] == r"^epoch/wall_seconds$"


def test_an_epoch_without_validation_is_all_training(tmp_path):
    clock = FakeClock()
    monitor = GPUMonitor(tmp_path, interval=3600, clock=clock, sources=lambda: [])
    x, y = data()
    callbacks = [Clock(clock), monitor]
    tiny_model().fit(x, y, batch_size=BATCH_SIZE, epochs=1, callbacks=callbacks, verbose=0)
    scalars = read_scalars(tmp_path / "hardware")
    assert scalars["epoch/seconds"] == scalars["epoch/wall_seconds"] == [(0, 1.0)]
    assert not [tag for tag in scalars if tag.startswith("validation/")]


class FailDuringValidation(keras.callbacks.Callback):
    def on_test_batch_end(self, batch, logs=None):
        if batch == 1:
            raise RuntimeError("validation failed")


def test_a_fit_failing_in_validation_keeps_the_epochs_training_part(tmp_path):
    phase = Phase()
    monitor = GPUMonitor(
        tmp_path,
        interval=0.05,  # the sampler thread notices the fit is gone
        sources=lambda: [FakeSource("gpu0", lambda _: {"utilization_percent": phase.utilization})],
    )
    x, y = data()
    with pytest.raises(RuntimeError, match="validation failed"):
        tiny_model().fit(
            x,
            y,
            batch_size=BATCH_SIZE,
            epochs=1,
            validation_data=(x, y),
            callbacks=[monitor, phase, FailDuringValidation()],
            verbose=0,
        )
    wait_for_no_sampler_thread()
    assert not sampler_threads()
    scalars = read_scalars(tmp_path / "hardware")
    # Every training sample was read before validation began, all at the training reading.
    assert scalars["gpu0/utilization_percent/max"] == [(0, TRAINING_UTILIZATION)]
    assert [step for step, _ in scalars["validation/gpu0/samples"]] == [0]
    assert "epoch/seconds" not in scalars  # an epoch cut short has no figures
