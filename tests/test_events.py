"""`monitor.events`: statistics to scalars and `logs` entries, and the event writer."""

from __future__ import annotations

import errno

import numpy as np
import pytest
from events import event_files, read_scalars
from readme import logged_tags_table
from tensorboard.plugins.scalar.summary import scalar_pb
from tensorboard.summary.writer.record_writer import RecordWriter

from tfthroughput.hardware.activity import BUSY_BUT_IDLE
from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.hardware.stats import MetricStats, summarize
from tfthroughput.hardware.window_stats import WindowStats, WindowTotal
from tfthroughput.monitor.dashboard import hardware_layout
from tfthroughput.monitor.events import (
    EPOCH_FIGURES,
    EventWriter,
    energy_joules,
    epoch_figures,
    hardware_scalars,
    logs_entries,
    overstated_utilization_warning,
    scalar_summary,
    window_scalars,
)

STATS = WindowStats(
    {
        SampleKey("gpu0", "utilization_percent"): MetricStats(
            mean=50.0, min=10.0, max=90.0, p95=88.0, count=7
        ),
        SampleKey("gpu0", "power_watts"): MetricStats(
            mean=200.0, min=150.0, max=250.0, p95=245.0, count=6
        ),
        SampleKey("host", "cpu_percent"): MetricStats(
            mean=30.0, min=20.0, max=40.0, p95=39.0, count=3
        ),
    },
    start=0.0,
    end=2.0,
    buffer_samples={},
)

# The same window with GPU-Util from NVML's buffer (10 samples over 7 reads) and an energy total.
BUFFERED = WindowStats(
    STATS,
    start=0.0,
    end=2.0,
    buffer_samples={SampleKey("gpu0", "utilization_percent"): 10},
    totals={SampleKey("gpu0", "energy_joules"): WindowTotal(amount=400.0, counter=True)},
)


@pytest.mark.parametrize(
    ("seconds", "steps", "batch_size", "expected"),
    [
        (2.0, 10, 32, {"seconds": 2.0, "steps_per_second": 5.0, "examples_per_second": 160.0}),
        (2.0, 10, None, {"seconds": 2.0, "steps_per_second": 5.0}),
        (2.0, None, 32, {"seconds": 2.0}),
        (None, 10, 32, {}),  # an epoch cut short has no wall time
        (0.0, 10, 32, {}),
    ],
)
def test_epoch_figures_are_given_only_when_known(seconds, steps, batch_size, expected):
    assert epoch_figures(seconds, steps, batch_size) == expected


def test_hardware_scalars_join_each_key_once_into_a_tag():
    figures = {"seconds": 2.0, "steps_per_second": 5.0}
    assert hardware_scalars(STATS, ("mean", "p95"), figures) == {
        "gpu0/utilization_percent/mean": 50.0,
        "gpu0/utilization_percent/p95": 88.0,
        "gpu0/power_watts/mean": 200.0,
        "gpu0/power_watts/p95": 245.0,
        "host/cpu_percent/mean": 30.0,
        "host/cpu_percent/p95": 39.0,
        "gpu0/samples": 7,
        "host/samples": 3,
        "epoch/seconds": 2.0,
        "epoch/steps_per_second": 5.0,
    }


def test_buffer_counts_energy_and_joules_per_example_get_their_own_tags():
    figures = epoch_figures(2.0, 10, 32, joules=energy_joules(BUFFERED))
    assert figures["joules_per_example"] == 400.0 / 320
    scalars = hardware_scalars(BUFFERED, ("mean",), figures)
    assert scalars["gpu0/utilization_percent/samples"] == 10
    assert scalars["gpu0/samples"] == 6  # the monitor's own reads, from the point metric
    assert scalars["gpu0/energy_joules"] == 400.0
    assert scalars["gpu0/energy_joules/from_counter"] == 1.0
    assert scalars["epoch/joules_per_example"] == 1.25
    assert logs_entries(BUFFERED, {})["gpu0_energy_joules"] == 400.0


def test_a_window_restricted_to_some_metrics_keeps_their_counts_and_totals():
    only_gpu_util = BUFFERED.only(lambda key: key.metric == "utilization_percent")
    assert list(only_gpu_util) == [SampleKey("gpu0", "utilization_percent")]
    assert only_gpu_util.buffer_samples == {SampleKey("gpu0", "utilization_percent"): 10}
    assert only_gpu_util.totals == {}
    assert energy_joules(only_gpu_util) is None


def test_logs_entries_are_plain_names_that_keras_tensorboard_prefixes_once():
    entries = logs_entries(STATS, {"seconds": 2.0, "examples_per_second": 160.0})
    assert entries == {
        "gpu0_utilization_percent": 50.0,
        "gpu0_power_watts": 200.0,
        "host_cpu_percent": 30.0,
        "seconds": 2.0,
        "examples_per_second": 160.0,
    }
    assert not any("/" in key or key.startswith("epoch") for key in entries)


# GPU-Util and SM activity of bf16 matmul loops on an H200 (64x64, 1024x1024, 8192x8192).
H200_ROWS = [(23.6, 0.5), (47.8, 27.5), (95.5, 92.5)]


def _activity_stats(utilization: float, sm_activity: float) -> WindowStats:
    stats = {
        SampleKey("gpu0", "utilization_percent"): summarize([utilization]),
        SampleKey("gpu0", "sm_activity_percent"): summarize([sm_activity]),
        SampleKey("gpu1", "utilization_percent"): summarize([utilization]),  # no GPM there
    }
    return WindowStats(stats, start=0.0, end=1.0, buffer_samples={})


@pytest.mark.parametrize(("utilization", "sm_activity"), H200_ROWS)
def test_busy_but_idle_is_logged_where_sm_activity_is_read(utilization, sm_activity):
    stats = _activity_stats(utilization, sm_activity)
    scalars = hardware_scalars(stats, ("mean",), {})
    assert scalars["gpu0/busy_but_idle_percent"] == utilization - sm_activity
    assert "gpu1/busy_but_idle_percent" not in scalars
    entries = logs_entries(stats, {})
    assert entries["gpu0_busy_but_idle_percent"] == utilization - sm_activity
    assert "gpu1_busy_but_idle_percent" not in entries


def test_only_the_tiny_kernel_row_warns_that_gpu_util_overstates_the_work():
    messages = [overstated_utilization_warning(_activity_stats(*row), 3) for row in H200_ROWS]
    assert messages[1:] == [None, None]
    assert messages[0].startswith("gpu0: GPU-Util 23.6 % but SM activity 0.5 % in epoch 3")
    assert "overstates the work 47x" in messages[0]
    assert "`gpu0/busy_but_idle_percent`" in messages[0]
    no_sm_at_all = overstated_utilization_warning(_activity_stats(30.0, 0.0), 0)
    assert "overstates the work far" in no_sm_at_all


def test_the_readme_lists_the_busy_but_idle_tag_with_its_unit():
    rows = {tag: (unit, meaning) for tag, unit, meaning in logged_tags_table()}
    unit, meaning = rows[f"`gpu<i>/{BUSY_BUT_IDLE}`"]
    assert unit == "%"
    assert "GPU-Util minus" in meaning and "SM activity" in meaning


def test_the_readme_lists_every_epoch_figure():
    tags = {tag: unit for tag, unit, _ in logged_tags_table() if tag.startswith("`epoch/")}
    assert tags == {
        "`epoch/seconds`": "s",
        "`epoch/steps_per_second`": "steps/s",
        "`epoch/examples_per_second`": "examples/s",
        "`epoch/joules_per_example`": "J/example",
    }
    assert set(tags) == {f"`epoch/{name}`" for name in EPOCH_FIGURES}


def test_the_readme_lists_every_window_figure_as_its_epoch_figure():
    table = {tag: unit for tag, unit, _ in logged_tags_table()}
    for name in EPOCH_FIGURES:
        assert table[f"`window/{name}`"] == table[f"`epoch/{name}`"]
    assert table["`window/<tag>`"] == "as `<tag>`"


def test_window_scalars_are_the_epochs_tags_under_window():
    energy = SampleKey("gpu0", "energy_joules")
    window = WindowStats(
        dict(STATS), start=0.0, end=2.0, buffer_samples={}, totals={energy: WindowTotal(5.0, True)}
    )
    scalars = window_scalars(window, ("mean",), {"seconds": 2.0, "steps_per_second": 5.0})
    assert scalars == {
        "window/gpu0/utilization_percent/mean": 50.0,
        "window/gpu0/power_watts/mean": 200.0,
        "window/host/cpu_percent/mean": 30.0,
        "window/gpu0/samples": 7,
        "window/host/samples": 3,
        "window/gpu0/energy_joules": 5.0,
        "window/gpu0/energy_joules/from_counter": 1.0,
        "window/seconds": 2.0,
        "window/steps_per_second": 5.0,
    }


def test_the_layout_is_written_only_when_asked(tmp_path):
    writer = EventWriter(str(tmp_path / "hardware"), str(tmp_path))
    (file,) = event_files(tmp_path / "hardware")
    assert b"tfthroughput:" not in open(file, "rb").read()  # not before the sources are known
    writer.write_layout(hardware_layout([SampleKey("host", "cpu_percent")]))
    writer.close()
    assert b"tfthroughput: host (mean and p95, per epoch)" in open(file, "rb").read()


@pytest.mark.parametrize("value", [0, 7, 50.0, 23.6 - 0.5, 1e-9, -3.25, np.float64(0.1)])
def test_scalar_summaries_are_byte_for_byte_tensorboards_own(value):
    tag = "gpu0/utilization_percent/mean"
    expected = scalar_pb(tag, value).SerializeToString()
    assert scalar_summary({tag: value}).SerializeToString() == expected


def test_the_writer_writes_every_scalar_at_its_step_and_ignores_writes_after_close(tmp_path):
    writer = EventWriter(str(tmp_path / "hardware"), str(tmp_path))
    writer.write(3, {"gpu0/utilization_percent/mean": 50.0, "epoch/seconds": 2.0})
    writer.write(4, {"gpu0/utilization_percent/mean": 75.0})
    writer.close()
    writer.write(5, {"gpu0/utilization_percent/mean": 99.0})
    writer.close()
    assert read_scalars(tmp_path / "hardware") == {
        "gpu0/utilization_percent/mean": [(3, 50.0), (4, 75.0)],
        "epoch/seconds": [(3, 2.0)],
    }


def test_an_unwritable_folder_fails_when_opened(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match="`log_dir` is not writable") as info:
        EventWriter(str(blocker / "hardware"), str(blocker))
    assert f"Received: log_dir={str(blocker)!r}" in str(info.value)


def test_a_fault_while_writing_is_a_warning(tmp_path):
    class FullDisk:
        """A file on a full disk, under TensorBoard's real record writer."""

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

        def close(self):
            pass

    writer = EventWriter(str(tmp_path / "hardware"), str(tmp_path))
    writer._writer.close()
    writer._writer = RecordWriter(FullDisk())
    with pytest.warns(MonitoringWarning, match="could not write epoch 2 .*No space left"):
        writer.write(2, {"gpu0/utilization_percent/mean": 50.0})
    writer.close()
