"""GPUMonitor under file-system faults, in real fits: nothing of the run is lost to a name
collision, and a write fault (full disk, read-only or deleted folder, hung file system) is
warned about once, counted, and never stops or slows training; a fit interrupted and resumed
with ``keras.callbacks.BackupAndRestore`` writes each step and each epoch once.

Faults are injected through the monitor's file-creating seam (``_create_event_file``, see
tests/faulty_disk.py): real files in ``tmp_path`` whose writes fail or hang on the test's word.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import subprocess
import time
import warnings
from pathlib import Path

import keras
import pytest
from events import event_files, read_scalars, summary_values
from fakes import FakeSource
from faulty_disk import FaultyDisk
from fits import RaiseDuringEpoch, fit, tiny_model

from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.diagnosis.diagnosis_report import DiagnosisReport
from tfthroughput.diagnosis.recommendations import Recommendation
from tfthroughput.diagnosis.verdict import INPUT_BOUND

ROOT = Path(__file__).resolve().parents[1]


def _sources():
    return [FakeSource("gpu0", {"utilization_percent": 40.0}), FakeSource("host", {})]


def _monitor(log_dir, disk: FaultyDisk | None = None, **kwargs) -> GPUMonitor:
    if disk is None:
        return GPUMonitor(log_dir, interval=0.05, sources=_sources, **kwargs)

    class OnFaultyDisk(GPUMonitor):
        _create_event_file = staticmethod(disk.create)
        _append_event_file = staticmethod(disk.append)

    return OnFaultyDisk(log_dir, interval=0.05, sources=_sources, **kwargs)


class AtEpochBegin(keras.callbacks.Callback):
    """Calls ``action()`` when epoch ``epoch`` begins (listed before the monitor)."""

    def __init__(self, epoch: int, action) -> None:
        super().__init__()
        self.epoch, self.action = epoch, action

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            self.action()


def _once_epoch_0_is_on_disk(run_dir, action):
    """``action``, called once epoch 0's record is in the file: the writer's thread writes it
    a moment after the epoch's end, and a fault injected before would hit it too."""

    def wait_then_act():
        deadline = time.monotonic() + 10

        def written() -> bool:  # the epoch's scalars, then its reading, queued right after
            return bool(read_scalars(run_dir).get("epoch/seconds")) and bool(
                summary_values(run_dir, "text")
            )

        while not written() and time.monotonic() < deadline:
            time.sleep(0.01)
        action()

    return wait_then_act


def _monitoring_warnings(action) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    return [str(w.message) for w in caught if issubclass(w.category, MonitoringWarning)]


def _steps(scalars, tag) -> list[int]:
    return [step for step, _ in scalars.get(tag, [])]


# ----------------------------------------------------------------------- no file is lost

# TensorFlow's writer and the monitor each used to number their files from 0 in a fresh process,
# so a diagnosis and the monitor's file made in the same second got the same name. The wall
# clock is pinned to one second here (both writers name their files by it), so the two files
# always share their second and only their numbers can keep them apart.
ONE_SECOND = 1796000000.25
_REPORT = DiagnosisReport(
    batch_size=8,
    steps=4,
    repeats=1,
    input_batches_per_second=25.0,
    compute_batches_per_second=100.0,
    fit_batches_per_second=20.0,
    input_bound_fraction=0.8,
    verdict=INPUT_BOUND,
    recommendations=(Recommendation("parallel map", "4x too slow."),),
)


@pytest.mark.parametrize("diagnosis", ["before the fit", "after the fit"])
def test_a_diagnosis_written_in_the_run_folder_in_the_fits_second_loses_nothing(
    tmp_path, monkeypatch, diagnosis
):
    monkeypatch.setattr(time, "time", lambda: ONE_SECOND)
    run_dir = tmp_path / "hardware"
    monitor = GPUMonitor(
        str(tmp_path),
        interval=0.05,
        update_freq=2,
        sources=lambda: [FakeSource("host", {"cpu_percent": 5.0})],
    )
    if diagnosis == "before the fit":
        _REPORT.write_to_tensorboard(str(run_dir))
    fit(tiny_model(), [monitor], epochs=1)
    if diagnosis == "after the fit":
        _REPORT.write_to_tensorboard(str(run_dir))
    files = event_files(run_dir)
    assert len(files) == 2  # the diagnosis's and the monitor's
    assert {name.split(".")[3] for name in map(os.path.basename, files)} == {"1796000000"}
    scalars = read_scalars(run_dir)
    assert len(scalars["window/host/cpu_percent/mean"]) == 2  # its two windows of 2 steps
    assert _steps(scalars, "host/cpu_percent/mean") == [0]
    texts = sorted(value.tag for _, value in summary_values(run_dir, "text"))
    assert texts == ["diagnosis/report", "input/reading"]  # the report, the epoch's reading
    assert len(summary_values(run_dir, "custom_scalars")) == 1  # the layout


def test_two_monitors_writing_to_one_folder_lose_nothing(tmp_path):
    first, second = _monitor(tmp_path), _monitor(tmp_path)  # a mistake, but nothing is lost
    fit(tiny_model(), [first, second], epochs=2)
    files = event_files(tmp_path / "hardware")
    assert len(files) == 2
    for file in files:
        assert _steps(read_scalars(file), "gpu0/utilization_percent/mean") == [0, 1]


# ------------------------------------------------------------------ faults, told once


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("fill", "No space left on device"), ("make_read_only", "Read-only file system")],
)
def test_a_write_fault_mid_fit_is_warned_once_and_counted_and_training_goes_on(
    tmp_path, fault, reason
):
    disk = FaultyDisk()
    monitor = _monitor(tmp_path, disk, update_freq=2)
    run_dir = tmp_path / "hardware"
    fits = []
    told = _monitoring_warnings(
        lambda: fits.append(
            fit(
                tiny_model(),
                [AtEpochBegin(1, _once_epoch_0_is_on_disk(run_dir, getattr(disk, fault))), monitor],
                epochs=3,
            )
        )
    )
    assert fits[0].epoch == [0, 1, 2]  # training never stopped
    # Once with the reason (at the next write, or at the end if none came), once with the
    # count at the end: never once per window or epoch.
    assert 1 <= len(told) <= 2, told
    assert f"OSError: {reason}" in told[0]
    # After the fault: the windows at steps 6, 8, 10, 12, epochs 1 and 2 and their readings.
    assert re.search(r": 8 of \d+ record\(s\) were not written", told[-1]), told
    scalars = read_scalars(tmp_path / "hardware")  # what came before the fault is all there
    assert _steps(scalars, "window/gpu0/utilization_percent/mean") == [2, 4]
    assert _steps(scalars, "gpu0/utilization_percent/mean") == [0]


@contextlib.contextmanager
def _small_filesystem(path: Path):
    """A 1 MiB tmpfs mounted at ``path``; skips where this process may not mount (not root)."""
    path.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)]
    try:
        result = subprocess.run(mount, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        pytest.skip("no `mount` command")
    if result.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root: {result.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(folder: Path) -> None:
    with open(folder / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC


def test_a_real_disk_filled_mid_fit_is_warned_once_and_counted(tmp_path):
    with _small_filesystem(tmp_path / "small") as log_dir:
        run_dir = log_dir / "hardware"
        fill = _once_epoch_0_is_on_disk(run_dir, lambda: _fill(log_dir))
        fits = []
        told = _monitoring_warnings(
            lambda: fits.append(
                fit(tiny_model(), [AtEpochBegin(1, fill), _monitor(log_dir, update_freq=2)], 3)
            )
        )
        assert fits[0].epoch == [0, 1, 2]
        assert 1 <= len(told) <= 2, told
        assert "No space left on device" in told[0]
        lost, handed_off = map(int, re.search(r"(\d+) of (\d+) record", told[-1]).groups())
        # A record that still fitted in the file's last page was written; every other one is
        # counted: the file's records and the count add up to all that was handed off.
        scalars = read_scalars(run_dir)
        windows = {
            step
            for tag, points in scalars.items()
            if tag.startswith("window/")
            for step, _ in points
        }
        epochs = {
            step
            for tag, points in scalars.items()
            if not tag.startswith("window/")
            for step, _ in points
        }
        layouts = len(summary_values(run_dir, "custom_scalars"))
        readings = len(summary_values(run_dir, "text"))  # each epoch's input/reading
        written = len(windows) + len(epochs) + layouts + readings
        assert lost >= 1 and written + lost == handed_off
        assert 0 in epochs and 2 not in epochs  # written before the disk filled; not after
        assert len(event_files(run_dir)) == 1  # no empty file left by the attempts


def test_a_log_folder_deleted_mid_fit_is_made_again_and_the_fit_goes_on_there(tmp_path):
    run_dir = tmp_path / "hardware"
    delete = _once_epoch_0_is_on_disk(run_dir, lambda: shutil.rmtree(tmp_path))
    told = _monitoring_warnings(
        lambda: fit(
            tiny_model(), [AtEpochBegin(1, delete), _monitor(tmp_path, update_freq=2)], epochs=3
        )
    )
    assert len(told) == 1 and "its event file was deleted; writing on in a new file" in told[0]
    scalars = read_scalars(run_dir)
    assert _steps(scalars, "window/gpu0/utilization_percent/mean") == [6, 8, 10, 12]
    assert _steps(scalars, "gpu0/utilization_percent/mean") == [1, 2]
    assert len(summary_values(run_dir, "custom_scalars")) == 1  # the layout, written again


def test_a_read_only_log_folder_fails_before_the_first_step(tmp_path):
    disk = FaultyDisk()
    disk.make_read_only()
    model = tiny_model()
    with pytest.raises(ValueError, match=r"`log_dir` is not writable \(Read-only file system\)"):
        fit(model, [_monitor(tmp_path, disk)])
    assert int(model.optimizer.iterations) == 0


def test_a_hung_file_system_never_holds_the_training_step(tmp_path):
    disk = FaultyDisk()
    seen_at_epoch_end = []

    class HangAfterTheFileIsMade(keras.callbacks.Callback):  # listed after the monitor
        def on_train_begin(self, logs=None):
            disk.hang = True

        def on_epoch_end(self, epoch, logs=None):
            assert disk.blocked.wait(10)
            seen_at_epoch_end.append(not disk.release.is_set())

    class AnswerAgainAtTheEnd(keras.callbacks.Callback):  # listed before the monitor
        def on_train_end(self, logs=None):
            disk.hang = False
            disk.release.set()

    monitor = _monitor(tmp_path, disk, update_freq=2)
    told = _monitoring_warnings(
        lambda: fit(
            tiny_model(), [AnswerAgainAtTheEnd(), monitor, HangAfterTheFileIsMade()], epochs=3
        )
    )
    # Every epoch ended while the writer's thread was stuck in a write: the training thread
    # never waited for it (it would have waited out FaultyDisk's 30 s and set timed_out).
    assert seen_at_epoch_end == [True, True, True]
    assert not disk.timed_out
    # Once the file system answers, the monitor's end writes everything that waited.
    assert told == []
    scalars = read_scalars(tmp_path / "hardware")
    assert _steps(scalars, "window/gpu0/utilization_percent/mean") == list(range(2, 13, 2))
    assert _steps(scalars, "gpu0/utilization_percent/mean") == [0, 1, 2]


# ------------------------------------------------------------------ interrupted, resumed


def test_a_fit_resumed_with_backup_and_restore_continues_the_steps_and_writes_each_once(
    tmp_path,
):
    monitor = _monitor(tmp_path / "logs", update_freq=2)
    backup = str(tmp_path / "backup")
    interrupted = tiny_model()
    with pytest.raises(RuntimeError, match="preempted"):
        fit(
            interrupted,
            [
                keras.callbacks.BackupAndRestore(backup),
                monitor,
                RaiseDuringEpoch(1, 2, RuntimeError("preempted")),
            ],
            epochs=3,
        )
    assert int(interrupted.optimizer.iterations) == 7  # the backup holds epoch 0: step 4
    resumed = tiny_model()
    history = fit(resumed, [keras.callbacks.BackupAndRestore(backup), monitor], epochs=3)
    assert history.epoch == [1, 2] and int(resumed.optimizer.iterations) == 12

    scalars = read_scalars(tmp_path / "logs" / "hardware")
    # The interrupted fit: windows at 2, 4, 6 and the one cut short at step 7. The resumed
    # fit redoes steps 5-7 from the backup: its first window ends at 8, past what was
    # written, and holds steps 5-8; then 10 and 12. Each step once, in order.
    assert _steps(scalars, "window/seconds") == [2, 4, 6, 7, 8, 10, 12]
    # Each epoch once: epoch 1 from the resumed fit only (the interrupted one is a window).
    assert _steps(scalars, "gpu0/utilization_percent/mean") == [0, 1, 2]
    assert _steps(scalars, "epoch/seconds") == [0, 1, 2]
