"""A monitored fit while it runs: when the layout is written, windows for readers, faults."""

from __future__ import annotations

import keras
import pytest
from events import read_layouts, read_scalars
from fakes import FakeSource
from fits import RaiseDuringEpoch, fit, tiny_model, wait_for_no_sampler_thread
from tensorboard.plugins.custom_scalar import layout_pb2

from tfthroughput import GPUMonitor


def _chart_titles(layout: layout_pb2.Layout) -> list[str]:
    return [chart.title for category in layout.category for chart in category.chart]


class Dial(keras.callbacks.Callback):
    epoch = -1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch


def test_the_layout_follows_what_the_run_measures(tmp_path):
    dial = Dial()

    def gpu(read: int) -> dict[str, float]:
        # SM activity shows up only from the second epoch on (as if GPM came late).
        return {
            "utilization_percent": 50.0,
            **({"sm_activity_percent": 40.0} if dial.epoch else {}),
        }

    monitor = GPUMonitor(
        tmp_path, interval=3600, update_freq=2, sources=lambda: [FakeSource("gpu0", gpu)]
    )
    fit(tiny_model(), [dial, monitor], epochs=3)

    layouts = read_layouts(tmp_path / "hardware")
    # Written with the first window, then once more when SM activity appeared; not again.
    assert len(layouts) == 2
    assert "SM activity [%]" not in _chart_titles(layouts[0])
    assert "GPU utilization [%]" in _chart_titles(layouts[0])
    assert _chart_titles(layouts[1])[:3] == [
        "GPU utilization [%]",
        "SM activity [%]",
        "examples per second",  # the batch size is read from the fit
    ]


def test_a_run_without_samples_still_gets_its_throughput_layout(tmp_path):
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=lambda: [])
    fit(tiny_model(), [monitor], epochs=2)
    layouts = read_layouts(tmp_path / "hardware")
    assert len(layouts) == 1
    # The batch size is read from the fit, so examples/s leads; the throughput row follows.
    assert _chart_titles(layouts[0]) == [
        "examples per second",
        "waiting for input [%]",  # the fit's input is counted, so its wait is timed
        "steps per second",
        "examples per second",
        "training time [s]",
        "epoch wall time, validation included [s]",
    ]


def test_windows_are_offered_to_readers_during_the_fit(tmp_path):
    class Reader(keras.callbacks.Callback):
        def __init__(self, monitor):
            super().__init__()
            self.monitor = monitor
            self.seen = []

        def on_train_batch_end(self, batch, logs=None):  # not async_safe: Keras waits for it
            if self.monitor.window_count > len(self.seen):
                self.seen.extend(self.monitor.windows_since(len(self.seen)))

    source = FakeSource("gpu0", lambda n: {"utilization_percent": float(n)})
    monitor = GPUMonitor(tmp_path, interval=3600, update_freq=1, sources=lambda: [source])
    reader = Reader(monitor)
    fit(tiny_model(), [monitor, reader], epochs=2)
    # Steps 1-3 end a window each, the epoch's end ends step 4's; the reader sees each one
    # after the step that ended it (the epoch's, after the next step) except the fit's last.
    assert [(w.index, w.epoch, w.step, w.steps) for w in reader.seen] == [
        (i, i // 4, i + 1, 1) for i in range(7)
    ]
    assert [w.stats[("gpu0", "utilization_percent")].mean for w in reader.seen] == [
        float(n) for n in range(1, 8)
    ]
    assert monitor.window_count == 0 and monitor.windows_since(0) == ()  # fit is over


def test_every_epoch_is_a_window_for_readers_without_update_freq(tmp_path):
    seen = []

    class Reader(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.extend(monitor.windows_since(len(seen)))

    monitor = GPUMonitor(tmp_path, interval=0.05, sources=lambda: [FakeSource("host", {})])
    fit(tiny_model(), [monitor, Reader()], epochs=2)
    assert [(w.epoch, w.step, w.steps) for w in seen] == [(0, 4, 4), (1, 8, 4)]


def test_a_fit_that_raises_keeps_the_windows_and_the_epoch_cut_short(tmp_path):
    source = FakeSource("gpu0", lambda n: {"utilization_percent": float(n)})
    monitor = GPUMonitor(tmp_path, interval=3600, update_freq=2, sources=lambda: [source])
    with pytest.raises(RuntimeError, match="boom"):
        fit(tiny_model(), [monitor, RaiseDuringEpoch(1, 2, RuntimeError("boom"))], epochs=3)
    monitor.close()
    wait_for_no_sampler_thread()
    scalars = read_scalars(tmp_path / "hardware")
    # Epoch 0: windows at steps 2 and 4; epoch 1 stopped after its third step (step 7): the
    # window it was in is written (no reading fell in it); the epoch cut short is not written
    # as an epoch, its samples are in its windows.
    assert [step for step, _ in scalars["window/seconds"]] == [2, 4, 6, 7]
    assert [step for step, _ in scalars["window/gpu0/utilization_percent/mean"]] == [2, 4, 6]
    assert [step for step, _ in scalars["gpu0/utilization_percent/mean"]] == [0]
