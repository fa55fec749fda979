"""DipTrigger: when a run of low windows fires a capture, and ProfileSteps capturing on it."""

from __future__ import annotations

import glob
import os

import keras
import pytest
import tensorflow as tf
from events import event_files
from fakes import FakeClock, FakeSource
from fits import fit, tiny_model
from readme import logged_tags_table

from tfthroughput import DipTrigger, GPUMonitor, ProfileSteps
from tfthroughput.demo.run import COMPARISON_TAG
from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.hardware.stats import summarize
from tfthroughput.monitor.epoch_windows import Window
from tfthroughput.profiling.profile_steps import CAPTURE_TAG
from tfthroughput.report.folder_events import DIAGNOSIS_TAG

GPU_UTIL = SampleKey("gpu0", "utilization_percent")


class ScriptedMonitor:
    """Offers windows the way GPUMonitor does, from a script."""

    def __init__(self) -> None:
        self.windows: list[Window] = []

    def add(self, epoch: int, gpu: float | None = None, steps_per_second: float = 1.0) -> None:
        step = (self.windows[-1].step if self.windows else 0) + 10
        stats = {} if gpu is None else {GPU_UTIL: summarize([gpu])}
        window = Window(len(self.windows), epoch, step, 10, 10 / steps_per_second, stats)
        self.windows.append(window)

    @property
    def window_count(self) -> int:
        return len(self.windows)

    def windows_since(self, index: int) -> tuple[Window, ...]:
        return tuple(self.windows[index:])


def _trigger(monitor, clock=None, **kwargs) -> DipTrigger:
    trigger = DipTrigger(monitor, clock=clock or FakeClock(), **kwargs)
    trigger.begin_epoch(0)
    return trigger


def test_fires_after_k_low_windows_in_a_row_and_says_why():
    monitor = ScriptedMonitor()
    trigger = _trigger(monitor, threshold_percent=30, windows=3)
    monitor.add(1, gpu=90.0)
    monitor.add(1, gpu=10.0)
    monitor.add(1, gpu=20.0)
    assert trigger.poll() is None
    monitor.add(1, gpu=50.0)  # a good window ends the run of low ones
    monitor.add(1, gpu=12.0)
    monitor.add(1, gpu=9.0)
    assert trigger.poll() is None
    monitor.add(1, gpu=11.4)
    assert trigger.poll() == (
        "GPU utilization was below 30 % for 3 windows in a row (steps 41 to 70: 12 %, 9 %, 11 %)"
    )
    assert trigger.poll() is None  # nothing new


def test_never_counts_the_warm_up_epochs():
    monitor = ScriptedMonitor()
    trigger = _trigger(monitor, windows=2, warmup_epochs=1)
    for _ in range(5):
        monitor.add(0, gpu=0.0)  # the first epoch: tracing, caches filling
    assert trigger.poll() is None
    monitor.add(1, gpu=0.0)
    assert trigger.poll() is None
    monitor.add(1, gpu=0.0)
    assert trigger.poll() is not None


def test_fires_at_most_once_per_cooldown():
    monitor = ScriptedMonitor()
    clock = FakeClock()
    trigger = _trigger(monitor, clock=clock, windows=2, cooldown="10min")
    for _ in range(2):
        monitor.add(1, gpu=5.0)
    assert trigger.poll() is not None
    for _ in range(6):
        monitor.add(1, gpu=5.0)
        clock.advance(60)
        assert trigger.poll() is None  # still dipping, but within the cooldown
    clock.advance(240)  # 10 minutes after the first firing
    assert trigger.poll() is None  # it decides when a window ends
    monitor.add(1, gpu=5.0)
    assert trigger.poll() is not None


def test_without_a_gpu_it_compares_steps_per_second_to_the_best_window():
    monitor = ScriptedMonitor()
    trigger = _trigger(monitor, threshold_percent=50, windows=2)
    monitor.add(0, steps_per_second=100.0)  # warm-up: not the best to beat
    for rate in (20.0, 18.0, 8.0, 9.5):
        monitor.add(1, steps_per_second=rate)
    assert trigger.poll() == (
        "steps/s (in percent of the run's best window) was below 50 % for 2 windows in a row "
        "(steps 31 to 50: 40 %, 48 %)"
    )


def test_begin_fit_forgets_the_windows_of_an_earlier_fit():
    monitor = ScriptedMonitor()
    trigger = _trigger(monitor, windows=2)
    monitor.add(1, gpu=5.0)
    assert trigger.poll() is None
    monitor.windows.clear()  # the next fit's monitor counts from 0 again
    trigger.begin_fit()
    trigger.begin_epoch(4)
    monitor.add(4, gpu=5.0)  # the first epoch of this fit: warm-up again
    monitor.add(5, gpu=5.0)
    assert trigger.poll() is None


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"monitor": object()}, TypeError, "`monitor` must be a GPUMonitor"),
        ({"threshold_percent": 0}, ValueError, "threshold_percent=0"),
        ({"threshold_percent": "30"}, TypeError, "threshold_percent='30'"),
        ({"windows": 0}, ValueError, "windows=0"),
        ({"steps": 1.5}, TypeError, "steps=1.5"),
        ({"cooldown": 600}, TypeError, "cooldown=600"),
        ({"cooldown": "10"}, ValueError, "cooldown='10'"),
        ({"warmup_epochs": -1}, ValueError, "warmup_epochs=-1"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(kwargs, error, fragment):
    arguments = {"monitor": ScriptedMonitor(), **kwargs}
    with pytest.raises(error) as info:
        DipTrigger(**arguments)
    assert fragment in str(info.value)


def test_profile_steps_takes_only_a_dip_trigger():
    with pytest.raises(TypeError, match="`on_dip` must be a DipTrigger or None"):
        ProfileSteps(on_dip="low")
    profile = ProfileSteps(on_dip=DipTrigger(GPUMonitor()))
    assert profile.step_range is None  # no fixed window unless asked for
    assert ProfileSteps().step_range == (10, 20)


def test_the_readme_lists_the_text_tags():
    table = {tag: unit for tag, unit, _ in logged_tags_table()}
    for tag in (DIAGNOSIS_TAG, CAPTURE_TAG, COMPARISON_TAG):
        assert table[f"`{tag}`"] == "text"


def _text_entries(run_dir, tag: str) -> list[tuple[int, str]]:
    entries = []
    for file in event_files(run_dir):
        for record in tf.data.TFRecordDataset(file):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag == tag:
                    entries.append((event.step, value.tensor.string_val[0].decode()))
    return entries


def test_a_dip_after_warm_up_is_captured_once_at_the_next_step(tmp_path):
    # One reading per window (the window's end reads the sources; the sampler thread never
    # does at this interval), so the n-th reading is the n-th window's GPU-Util: epoch 0
    # dips but is warm-up; windows 4 and 5 (steps 8 and 10) dip; then it stays low.
    script = {1: 10.0, 2: 10.0, 3: 90.0, 4: 10.0, 5: 10.0}
    gpu = FakeSource("gpu0", lambda n: {"utilization_percent": script.get(n, 10.0)})
    monitor = GPUMonitor(tmp_path, interval=3600, update_freq=2, sources=lambda: [gpu])
    trigger = DipTrigger(monitor, threshold_percent=30, windows=2, steps=2, clock=FakeClock())
    profile = ProfileSteps(tmp_path, on_dip=trigger)
    board = keras.callbacks.TensorBoard(str(tmp_path), update_freq=3)  # see test_monitor
    fit(tiny_model(), [monitor, board, profile], epochs=4)

    assert profile.traced_steps == (11, 12)  # from the step after the dip's second window
    traces = glob.glob(os.path.join(tmp_path, "train", "plugins", "profile", "*", "*.xplane.pb"))
    assert len(traces) == 1  # once: the dip went on, but within the cooldown
    trace = os.path.basename(os.path.dirname(traces[0]))
    assert _text_entries(tmp_path / "train", "profile/capture") == [
        (
            11,
            f"Captured steps 11 to 12 (the Profile tab's session `train/{trace}`): GPU utilization "
            "was below 30 % for 2 windows in a row (steps 7 to 10: 10 %, 10 %).",
        )
    ]
