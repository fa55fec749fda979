"""`monitor.event_writer`: file names that collide with no one, records written off the caller's
thread, and faults (full disk, read-only or deleted folder, hung file system) counted and told
once."""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
import warnings

import pytest
from events import event_files, read_events, read_scalars, summary_values
from faulty_disk import FaultyDisk

from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.monitor import event_files as event_file_module
from tfthroughput.monitor import event_writer
from tfthroughput.monitor.dashboard import hardware_layout
from tfthroughput.monitor.event_files import event_file_name
from tfthroughput.monitor.event_writer import EventWriter

SECOND = 1796000000.25  # a fixed wall clock: every file below is named in the same second
# The names `tf.summary` gives its files: `...<seconds>.<host>.<pid>.<counter>.v2`.
TENSORFLOW_NAME = re.compile(r"events\.out\.tfevents\.\d+\..+\.\d+\.\d+\.v2")
LAYOUT = hardware_layout([SampleKey("host", "cpu_percent")])


def _writer(tmp_path, disk: FaultyDisk | None = None, **kwargs) -> EventWriter:
    create = {} if disk is None else {"create_file": disk.create, "append_file": disk.append}
    return EventWriter(str(tmp_path / "hardware"), str(tmp_path), **create, **kwargs)


def _caught(action) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    assert all(issubclass(w.category, MonitoringWarning) for w in caught), caught
    return [str(w.message) for w in caught]


def test_the_writer_writes_every_scalar_at_its_step_and_ignores_writes_after_close(tmp_path):
    writer = _writer(tmp_path)
    writer.write(3, {"gpu0/utilization_percent/mean": 50.0, "epoch/seconds": 2.0})
    writer.write(4, {"gpu0/utilization_percent/mean": 75.0})
    writer.close()
    writer.write(5, {"gpu0/utilization_percent/mean": 99.0})
    writer.close()
    assert read_scalars(tmp_path / "hardware") == {
        "gpu0/utilization_percent/mean": [(3, 50.0), (4, 75.0)],
        "epoch/seconds": [(3, 2.0)],
    }


def test_the_layout_is_written_only_when_asked(tmp_path):
    writer = _writer(tmp_path)
    (file,) = event_files(tmp_path / "hardware")
    assert b"tfthroughput:" not in open(file, "rb").read()  # not before the sources are known
    writer.write_layout(LAYOUT)
    writer.close()
    assert b"tfthroughput: host (mean and p95, per epoch)" in open(file, "rb").read()


def test_an_unwritable_folder_fails_when_opened(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match="`log_dir` is not writable") as info:
        EventWriter(str(blocker / "hardware"), str(blocker))
    assert f"Received: log_dir={str(blocker)!r}" in str(info.value)


def test_a_read_only_folder_fails_when_opened(tmp_path):
    disk = FaultyDisk()
    disk.create_error = PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    with pytest.raises(ValueError, match=r"`log_dir` is not writable \(Permission denied\)"):
        _writer(tmp_path, disk)


def test_names_are_never_tensorflows_and_an_existing_file_is_never_truncated(tmp_path, monkeypatch):
    run_dir = tmp_path / "hardware"
    run_dir.mkdir()
    monkeypatch.setattr(event_file_module, "_file_numbers", itertools.count(0))
    taken = run_dir / event_file_name(0, SECOND)
    taken.write_bytes(b"another writer's records")

    first = _writer(tmp_path, wall_clock=lambda: SECOND)
    second = _writer(tmp_path, wall_clock=lambda: SECOND)  # a second monitor, same folder
    for writer, value in ((first, 1.0), (second, 2.0)):
        writer.write(0, {"epoch/seconds": value})
        writer.close()

    assert taken.read_bytes() == b"another writer's records"
    names = sorted(os.path.basename(path) for path in (first.path, second.path))
    assert names == [event_file_name(1, SECOND), event_file_name(2, SECOND)]
    assert not any(TENSORFLOW_NAME.fullmatch(name) for name in names), names
    assert [read_scalars(w.path)["epoch/seconds"] for w in (first, second)] == [
        [(0, 1.0)],
        [(0, 2.0)],
    ]


def test_a_full_disk_is_warned_about_once_and_the_loss_counted_at_close(tmp_path):
    disk = FaultyDisk()
    writer = _writer(tmp_path, disk)
    writer.write_layout(LAYOUT)
    writer.write(0, {"epoch/seconds": 1.0})
    assert writer.flush(10)

    disk.fill(tear=True)  # the failing write leaves half a record in the file
    first = _caught(lambda: writer.write(1, {"epoch/seconds": 2.0}))
    assert first == [] and writer.flush(10)  # the fault is found on the writer's thread
    during = _caught(lambda: [writer.write(e, {"epoch/seconds": 3.0}) for e in (2, 3)])
    assert during == [
        f"GPUMonitor could not write to {writer.run_dir!r} (epoch 1: OSError: No space left "
        "on device). Training goes on; further write failures in this fit are counted and "
        "not warned about, and the count is given at its end."
    ]
    assert writer.flush(10)
    disk.write_error = None  # space freed: the next record goes to a new file
    at_close = _caught(lambda: (writer.write(4, {"epoch/seconds": 5.0}), writer.close()))
    assert at_close == [
        f"GPUMonitor could not write to {writer.run_dir!r}: 3 of 6 record(s) were not "
        "written (first failure: epoch 1: OSError: No space left on device)."
    ]
    assert writer.lost == 3
    # What was written before and after the fault is all there, the layout in both files
    # (TensorFlow's reader reads the first to its end: it was cut back to its last complete
    # record); no empty file is left from the attempts on the full disk.
    assert read_scalars(tmp_path / "hardware") == {"epoch/seconds": [(0, 1.0), (4, 5.0)]}
    files = event_files(tmp_path / "hardware")
    assert len(files) == 2 and sorted(files) == sorted(p for p in disk.created if os.path.exists(p))
    assert len(summary_values(tmp_path / "hardware", "custom_scalars")) == 2


def test_a_folder_made_read_only_mid_run_loses_only_what_came_meanwhile(tmp_path):
    disk = FaultyDisk()
    writer = _writer(tmp_path, disk)
    writer.write(0, {"epoch/seconds": 1.0})
    assert writer.flush(10)
    disk.make_read_only()
    writer.write(1, {"epoch/seconds": 2.0})
    assert writer.flush(10)
    told = _caught(lambda: writer.write(2, {"epoch/seconds": 3.0}))
    assert len(told) == 1 and "(epoch 1: OSError: Read-only file system)" in told[0]
    at_close = _caught(writer.close)
    assert at_close == [
        f"GPUMonitor could not write to {writer.run_dir!r}: 2 of 3 record(s) were not "
        "written (first failure: epoch 1: OSError: Read-only file system)."
    ]
    assert read_scalars(tmp_path / "hardware") == {"epoch/seconds": [(0, 1.0)]}


def test_a_deleted_folder_is_made_again_and_the_run_goes_on_there(tmp_path):
    writer = _writer(tmp_path)
    writer.write_layout(LAYOUT)
    writer.write(0, {"epoch/seconds": 1.0})
    assert writer.flush(10)
    shutil.rmtree(tmp_path / "hardware")
    writer.write(1, {"epoch/seconds": 2.0})
    assert writer.flush(10)
    told = _caught(lambda: (writer.write(2, {"epoch/seconds": 3.0}), writer.close()))
    assert len(told) == 1 and "its event file was deleted; writing on in a new file" in told[0]
    assert writer.lost == 0
    assert read_scalars(tmp_path / "hardware") == {"epoch/seconds": [(1, 2.0), (2, 3.0)]}
    assert len(summary_values(tmp_path / "hardware", "custom_scalars")) == 1  # written again


def test_a_hung_file_system_never_holds_the_caller_and_close_gives_up_in_time(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(event_writer, "QUEUE_LIMIT", 3)
    disk = FaultyDisk()
    writer = _writer(tmp_path, disk, close_timeout=0.2)
    disk.hang = True
    try:
        writer.write(0, {"epoch/seconds": 1.0})
        assert disk.blocked.wait(10)  # the writer's thread is stuck in a write
        # Every hand-off returns while the write hangs: the record being written and two
        # more wait (3 in all), then new ones are dropped.
        told = _caught(lambda: [writer.write(e, {"epoch/seconds": 1.0}) for e in range(1, 6)])
        assert told == [
            f"GPUMonitor could not write to {writer.run_dir!r} (epoch 3: the writer fell 3 "
            "records behind). Training goes on; further write failures in this fit are "
            "counted and not warned about, and the count is given at its end."
        ]
        at_close = _caught(writer.close)
        assert at_close == [
            f"GPUMonitor could not write to {writer.run_dir!r}: 6 of 6 record(s) were not "
            "written (first failure: epoch 3: the writer fell 3 records behind)."
        ]
    finally:
        disk.release.set()  # the file system answers again: the thread ends
        writer.close()


def test_a_writer_writes_on_at_the_end_of_a_file_no_other_writer_holds(tmp_path):
    first = _writer(tmp_path)
    first.write(0, {"predict/seconds": 1.0})
    held = _writer(tmp_path, append_to=first.path)  # first still holds it: a file of its own
    first.close()
    second = _writer(tmp_path, append_to=first.path)  # released: written on at its end
    for writer, step in ((held, 1), (second, 2)):
        writer.write(step, {"predict/seconds": float(step + 1)})
        writer.close()
    assert held.path != first.path and second.path == first.path
    assert read_scalars(first.path)["predict/seconds"] == [(0, 1.0), (2, 3.0)]
    assert read_scalars(held.path)["predict/seconds"] == [(1, 2.0)]
    # One version record, at the start: the file reads as one writer's.
    versions = [e for e in read_events(first.path) if e.HasField("file_version")]
    assert len(versions) == 1


def test_a_file_to_append_to_that_is_gone_or_unopenable_gives_a_new_file(tmp_path):
    gone = str(tmp_path / "hardware" / "events.out.tfevents.gone")
    fresh = _writer(tmp_path, append_to=gone)
    fresh.close()
    assert fresh.path != gone and not os.path.exists(gone)
    disk = FaultyDisk()
    first = _writer(tmp_path)
    first.close()
    disk.create_error = PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    with pytest.raises(ValueError, match="Permission denied"):
        _writer(tmp_path, disk, append_to=first.path)
    assert len(event_files(tmp_path / "hardware")) == 2  # fresh's and first's: no new file
    disk.create_error = None
    again = _writer(tmp_path, disk, append_to=first.path)  # the failed try held nothing
    again.close()
    assert again.path == first.path
