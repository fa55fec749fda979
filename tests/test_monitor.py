from __future__ import annotations

import csv
import os

import keras
import numpy as np
import pytest
from events import event_files, read_scalars
from fakes import FakeSource
from fits import (
    BATCH_SIZE,
    STEPS_PER_EPOCH,
    EpochDial,
    RaiseDuringEpoch,
    fake_gpus,
    fit,
    sampler_threads,
    tiny_model,
    wait_for_no_sampler_thread,
)

from tfthroughput import GPUMonitor, MonitoringWarning


def test_fit_writes_each_epochs_statistics_exactly(tmp_path):
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(dial), batch_size=BATCH_SIZE)
    fit(tiny_model(), [dial, monitor], epochs=3)

    scalars = read_scalars(tmp_path / "hardware")
    for statistic in ("mean", "min", "max", "p95"):
        assert scalars[f"gpu0/utilization_percent/{statistic}"] == [(0, 10.0), (1, 20.0), (2, 30.0)]
        assert scalars[f"gpu0/power_watts/{statistic}"] == [(0, 100.0), (1, 101.0), (2, 102.0)]
        assert scalars[f"gpu1/utilization_percent/{statistic}"] == [(0, 50.0), (1, 50.0), (2, 50.0)]
        assert scalars[f"host/cpu_percent/{statistic}"] == [(0, 75.0), (1, 75.0), (2, 75.0)]
    assert [step for step, _ in scalars["gpu0/samples"]] == [0, 1, 2]
    assert all(count >= 1 for _, count in scalars["gpu0/samples"])
    for (_, seconds), (_, steps_per_second), (_, examples_per_second) in zip(
        scalars["epoch/seconds"],
        scalars["epoch/steps_per_second"],
        scalars["epoch/examples_per_second"],
        strict=True,
    ):
        assert seconds > 0
        assert steps_per_second * seconds == pytest.approx(STEPS_PER_EPOCH, rel=1e-5)
        assert examples_per_second * seconds == pytest.approx(
            STEPS_PER_EPOCH * BATCH_SIZE, rel=1e-5
        )


def test_a_resumed_run_lines_up_by_epoch(tmp_path):
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(dial))
    fit(tiny_model(), [dial, monitor], epochs=4, initial_epoch=2)
    scalars = read_scalars(tmp_path / "hardware")
    assert scalars["gpu0/utilization_percent/mean"] == [(2, 30.0), (3, 40.0)]
    # No batch_size given: read from the fit (arrays, batch_size=BATCH_SIZE).
    for (_, seconds), (_, examples_per_second) in zip(
        scalars["epoch/seconds"], scalars["epoch/examples_per_second"], strict=True
    ):
        assert examples_per_second * seconds == pytest.approx(
            STEPS_PER_EPOCH * BATCH_SIZE, rel=1e-5
        )


@pytest.mark.tensorflow  # keras.callbacks.TensorBoard writes through tf.summary
def test_shares_a_log_dir_with_keras_tensorboard(tmp_path):
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(dial))
    board = keras.callbacks.TensorBoard(log_dir=str(tmp_path))
    fit(tiny_model(), [dial, board, monitor], epochs=2)
    assert sorted(os.listdir(tmp_path)) == ["hardware", "train"]
    assert [step for step, _ in read_scalars(tmp_path / "train")["epoch_loss"]] == [0, 1]
    assert read_scalars(tmp_path / "hardware")["gpu1/utilization_percent/mean"] == [
        (0, 50.0),
        (1, 50.0),
    ]


@pytest.mark.tensorflow  # keras.callbacks.TensorBoard writes through tf.summary
def test_keras_batch_level_tensorboard_does_not_swallow_the_monitors_writes(tmp_path):
    # TensorBoard(update_freq=3) keeps "record only when Keras's batch is a multiple of 3"
    # switched on for the whole fit; the monitor's epoch ends (steps 4, 8) are not.
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, update_freq=2, sources=fake_gpus(dial))
    board = keras.callbacks.TensorBoard(log_dir=str(tmp_path), update_freq=3)
    fit(tiny_model(), [dial, board, monitor], epochs=2)
    hardware = read_scalars(tmp_path / "hardware")
    assert hardware["gpu0/utilization_percent/mean"] == [(0, 10.0), (1, 20.0)]
    assert [step for step, _ in hardware["window/gpu1/utilization_percent/mean"]] == [2, 4, 6, 8]
    assert [step for step, _ in read_scalars(tmp_path / "train")["batch_loss"]] == [3, 6]


def read_csv(path) -> list[dict[str, str]]:
    with open(path) as file:
        return list(csv.DictReader(file))


@pytest.mark.tensorflow  # keras.callbacks.TensorBoard writes through tf.summary
def test_update_logs_keys_read_well_in_history_csv_logger_and_keras_tensorboard(tmp_path):
    dial = EpochDial()
    monitor = GPUMonitor(
        tmp_path,
        interval=0.05,
        sources=fake_gpus(dial),
        update_logs=True,
        hardware_metrics=["utilization_percent"],
        batch_size=BATCH_SIZE,
    )
    callbacks = [
        dial,
        keras.callbacks.CSVLogger(str(tmp_path / "before.csv")),
        monitor,
        keras.callbacks.CSVLogger(str(tmp_path / "after.csv")),
        keras.callbacks.TensorBoard(log_dir=str(tmp_path)),
    ]
    history = fit(tiny_model(), callbacks).history
    added = [
        "examples_per_second",
        "gpu0_utilization_percent",
        "gpu1_utilization_percent",
        "input_wait_percent",
        "seconds",
        "steps_per_second",
        "wall_seconds",
    ]
    # History comes last (Keras appends it), so it always sees them.
    assert sorted(history) == sorted(["loss", *added])
    assert history["gpu0_utilization_percent"] == [10.0, 20.0]
    assert history["gpu1_utilization_percent"] == [50.0, 50.0]
    for seconds, steps_per_second, examples_per_second in zip(
        history["seconds"],
        history["steps_per_second"],
        history["examples_per_second"],
        strict=True,
    ):
        assert steps_per_second * seconds == pytest.approx(STEPS_PER_EPOCH, rel=1e-5)
        assert examples_per_second * seconds == pytest.approx(
            STEPS_PER_EPOCH * BATCH_SIZE, rel=1e-5
        )
    # A CSVLogger before the monitor writes its row before the monitor adds anything.
    # (Without validation, CSVLogger adds an empty `val_` column for each key.)
    assert list(read_csv(tmp_path / "before.csv")[0]) == ["epoch", "loss", "val_loss"]
    after = read_csv(tmp_path / "after.csv")
    columns = sorted(["loss", *added])
    assert list(after[0]) == ["epoch", *columns, *(f"val_{column}" for column in columns)]
    assert [float(row["gpu0_utilization_percent"]) for row in after] == [10.0, 20.0]
    # keras.callbacks.TensorBoard writes a logs key `k` as the tag `epoch_k`.
    tags = read_scalars(tmp_path / "train")
    assert set(tags) == {"epoch_learning_rate", "epoch_loss", *(f"epoch_{k}" for k in added)}
    assert tags["epoch_gpu0_utilization_percent"] == [(0, 10.0), (1, 20.0)]
    assert tags["epoch_seconds"] == [
        (0, pytest.approx(history["seconds"][0])),
        (1, pytest.approx(history["seconds"][1])),
    ]


def test_statistics_selects_what_is_logged(tmp_path):
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(dial), statistics=["p95"])
    fit(tiny_model(), [dial, monitor], epochs=1)
    tags = set(read_scalars(tmp_path / "hardware"))
    assert "gpu0/utilization_percent/p95" in tags
    assert not any(tag.endswith(("/mean", "/min", "/max")) for tag in tags)


def test_gpu_util_against_sm_activity_is_logged_and_overstatement_warned_once(tmp_path):
    # The H200 rows (GPU-Util %, SM activity %), large kernels first, tiny ones last.
    rows = [(95.5, 92.5), (47.8, 27.5), (23.6, 0.5), (23.6, 0.5)]
    dial = EpochDial()

    def sources():
        reading = lambda _: dict(  # noqa: E731
            zip(("utilization_percent", "sm_activity_percent"), rows[dial.epoch], strict=True)
        )
        return [FakeSource("gpu0", reading)]

    monitor = GPUMonitor(tmp_path, interval=0.05, sources=sources)
    with pytest.warns(MonitoringWarning, match="GPU-Util overstates") as caught:
        fit(tiny_model(), [dial, monitor], epochs=len(rows))
    overstated = [w for w in caught if "overstates" in str(w.message)]
    assert len(overstated) == 1  # once per fit, at the first epoch that shows it
    assert "GPU-Util 23.6 % but SM activity 0.5 % in epoch 2" in str(overstated[0].message)
    scalars = read_scalars(tmp_path / "hardware")
    as_logged = [(epoch, float(np.float32(util - sm))) for epoch, (util, sm) in enumerate(rows)]
    assert scalars["gpu0/busy_but_idle_percent"] == as_logged
    assert scalars["gpu0/sm_activity_percent/mean"][2] == (2, float(np.float32(0.5)))


def test_a_reused_callback_reports_only_the_second_run(tmp_path):
    dial = EpochDial()
    offset = {"value": 0.0}
    monitor = GPUMonitor(
        tmp_path, interval=0.05, sources=lambda: fake_gpus(dial, offset["value"])()
    )
    fit(tiny_model(), [dial, monitor], epochs=2)
    offset["value"] = 1000.0
    fit(tiny_model(), [dial, monitor], epochs=2)
    first, second = event_files(tmp_path / "hardware")
    assert read_scalars(first)["gpu1/utilization_percent/max"] == [(0, 50.0), (1, 50.0)]
    second_run = read_scalars(second)
    assert second_run["gpu1/utilization_percent/min"] == [(0, 1050.0), (1, 1050.0)]
    assert second_run["gpu0/utilization_percent/mean"] == [(0, 1010.0), (1, 1020.0)]


@pytest.mark.parametrize("error", [RuntimeError("step failed"), KeyboardInterrupt()])
def test_an_interrupted_fit_stops_the_thread_and_keeps_what_was_sampled(tmp_path, error):
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(dial))
    with pytest.raises(type(error)):
        fit(tiny_model(), [dial, monitor, RaiseDuringEpoch(1, 2, error)], epochs=3)
    wait_for_no_sampler_thread()
    assert sampler_threads() == []
    scalars = read_scalars(tmp_path / "hardware")
    # Epoch 0 completed; epoch 1 was cut short after step 7, and its samples are on disk as
    # a window at that step: epoch tags hold completed epochs, each once (test_monitor_faults).
    assert scalars["gpu0/utilization_percent/mean"] == [(0, 10.0)]
    assert scalars["window/gpu0/utilization_percent/mean"] == [(7, 20.0)]
    assert [step for step, _ in scalars["epoch/seconds"]] == [0]


def test_an_unwritable_log_dir_fails_before_the_first_epoch(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    dial = EpochDial()
    monitor = GPUMonitor(blocker / "logs", interval=0.05, sources=fake_gpus(dial))
    with pytest.raises(ValueError, match="`log_dir` is not writable") as info:
        fit(tiny_model(), [dial, monitor])
    assert f"log_dir={str(blocker / 'logs')!r}" in str(info.value)
    assert dial.epoch == -1  # no epoch started
    assert sampler_threads() == []


def test_without_nvml_it_warns_once_and_logs_host_metrics(tmp_path):
    # This machine has no NVML library: the real pynvml path reports it.
    monitor = GPUMonitor(tmp_path, interval=0.05)
    with pytest.warns(MonitoringWarning, match="GPU metrics are off") as caught:
        history = fit(tiny_model(), [monitor])
    assert len([w for w in caught if "GPU metrics are off" in str(w.message)]) == 1
    assert len(history.history["loss"]) == 2
    scalars = read_scalars(tmp_path / "hardware")
    assert {tag.split("/")[0] for tag in scalars} == {"host", "epoch", "input"}
    assert 0.0 <= scalars["host/ram_used_percent/mean"][0][1] <= 100.0
    assert scalars["host/process_rss_gib/min"][0][1] > 0.0


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"interval": 0}, ValueError, "interval=0"),
        ({"interval": -2}, ValueError, "interval=-2"),
        ({"interval": "1s"}, TypeError, "interval='1s'"),
        ({"log_dir": 3}, TypeError, "log_dir=3"),
        ({"hardware_metrics": ["gpu_util"]}, ValueError, "hardware_metrics=['gpu_util']"),
        ({"hardware_metrics": "power_watts"}, TypeError, "hardware_metrics='power_watts'"),
        ({"statistics": ["median"]}, ValueError, "statistics=['median']"),
        ({"statistics": "mean"}, TypeError, "statistics='mean'"),
        ({"batch_size": 0}, ValueError, "batch_size=0"),
        ({"batch_size": 2.0}, TypeError, "batch_size=2.0"),
        ({"update_logs": "yes"}, TypeError, "update_logs='yes'"),
        ({"input_wait": 1}, TypeError, "input_wait=1"),
        ({"run_name": ""}, ValueError, "run_name=''"),
        ({"sources": [1]}, TypeError, "sources=[1]"),
    ],
)
def test_invalid_arguments_name_the_argument_and_value(tmp_path, kwargs, error, fragment):
    arguments = {"log_dir": tmp_path, **kwargs}
    with pytest.raises(error) as info:
        GPUMonitor(**arguments)
    assert fragment in str(info.value)
