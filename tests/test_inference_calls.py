"""``evaluate`` and ``predict`` measured by GPUMonitor: real calls on a clock the test moves,
without a ``fit`` before them, event files read back from their own runs."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from events import event_files, read_layouts, read_scalars
from fakes import FakeClock, FakeSource
from fits import fit, sampler_threads, tiny_model, wait_for_no_sampler_thread

from tfthroughput import GPUMonitor

EXAMPLES = 64
EVALUATE_BATCH_SECONDS = 0.5
PREDICT_BATCH_SECONDS = 0.125


class Batches(keras.callbacks.Callback):
    """Moves the monitor's clock at each inference batch; raises at ``fail_at``, if given."""

    def __init__(self, clock: FakeClock, fail_at: int | None = None) -> None:
        super().__init__()
        self.clock = clock
        self.fail_at = fail_at

    def on_test_batch_end(self, batch, logs=None):
        self.clock.advance(EVALUATE_BATCH_SECONDS)
        if batch == self.fail_at:
            raise RuntimeError("evaluation failed")

    def on_predict_batch_end(self, batch, logs=None):
        self.clock.advance(PREDICT_BATCH_SECONDS)


def _inputs():
    x = np.random.default_rng(2).normal(size=(EXAMPLES, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def _gpu():
    return [FakeSource("gpu0", {"utilization_percent": 30.0})]


def test_evaluate_without_fit_writes_its_own_run_with_exact_figures(tmp_path):
    clock = FakeClock()
    monitor = GPUMonitor(tmp_path, interval=3600, clock=clock, sources=_gpu)
    x, y = _inputs()
    tiny_model().evaluate(x, y, batch_size=16, callbacks=[monitor, Batches(clock)], verbose=0)
    assert not sampler_threads()
    scalars = read_scalars(tmp_path / "hardware" / "evaluate")
    assert scalars["evaluate/seconds"] == [(0, 2.0)]  # 4 batches of 0.5 s
    assert scalars["evaluate/steps_per_second"] == [(0, 2.0)]
    assert scalars["evaluate/examples_per_second"] == [(0, 32.0)]  # batch 16 read from the call
    assert scalars["evaluate/gpu0/utilization_percent/mean"] == [(0, 30.0)]
    assert not [tag for tag in scalars if not tag.startswith("evaluate/")]
    (layout,) = read_layouts(tmp_path / "hardware" / "evaluate")
    assert [c.title for c in layout.category][:2] == [
        "tfthroughput: evaluate at a glance (per call)",
        "tfthroughput: evaluate throughput per call",
    ]


def test_predict_calls_are_counted_and_their_windows_continue_across_calls(tmp_path):
    clock = FakeClock()
    monitor = GPUMonitor(tmp_path, interval=3600, update_freq=2, clock=clock, sources=_gpu)
    model = tiny_model()
    x, _ = _inputs()
    for _ in range(2):  # the clock moves before the monitor sees each batch end
        model.predict(x, batch_size=8, callbacks=[Batches(clock), monitor], verbose=0)
    assert not sampler_threads()
    scalars = read_scalars(tmp_path / "hardware" / "predict")
    # Each call: 8 batches of 0.125 s, at step = the calls measured before it.
    assert scalars["predict/seconds"] == [(0, 1.0), (1, 1.0)]
    assert scalars["predict/steps_per_second"] == [(0, 8.0), (1, 8.0)]
    assert scalars["predict/examples_per_second"] == [(0, 64.0), (1, 64.0)]
    # Windows every 2 batches, at step = batches of predict calls so far.
    windows = scalars["predict/window/steps_per_second"]
    assert [step for step, _ in windows] == [2, 4, 6, 8, 10, 12, 14, 16]
    assert {value for _, value in windows} == {8.0}
    assert scalars["predict/window/gpu0/utilization_percent/mean"][0] == (2, 30.0)
    assert len(event_files(tmp_path / "hardware" / "predict")) == 1  # the calls share a file


def test_a_loop_of_calls_writes_one_file_that_tensorboard_reads_whole(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    clock = FakeClock()
    monitor = GPUMonitor(tmp_path, interval=3600, clock=clock, sources=_gpu)
    model = tiny_model()
    x, _ = _inputs()
    predict = lambda: model.predict(  # noqa: E731
        x, batch_size=16, callbacks=[Batches(clock), monitor], verbose=0
    )
    for _ in range(5):
        predict()
    run = tmp_path / "hardware" / "predict"
    (file,) = event_files(run)
    reader = EventAccumulator(str(run))
    reader.Reload()
    seconds = [
        (e.step, float(make_ndarray(e.tensor_proto))) for e in reader.Tensors("predict/seconds")
    ]
    assert seconds == [(step, 0.5) for step in range(5)]  # 4 batches of 0.125 s each call
    # A file gone between calls (the user cleared the folder): the next call starts a new
    # one, and its step counts on.
    os.remove(file)
    predict()
    (second,) = event_files(run)
    assert second != file
    assert read_scalars(run)["predict/seconds"] == [(5, 0.5)]


@pytest.mark.parametrize(
    "interval",
    [
        0.05,  # the sampler thread notices that evaluate was left, and ends the call
        3600,  # it does not wake in time: the next call ends the one left behind
    ],
)
def test_a_failing_evaluate_keeps_what_it_measured_and_the_next_call_counts_on(tmp_path, interval):
    clock = FakeClock()
    monitor = GPUMonitor(tmp_path, interval=interval, clock=clock, sources=_gpu)
    x, y = _inputs()
    with pytest.raises(RuntimeError, match="evaluation failed"):
        tiny_model().evaluate(x, y, batch_size=8, callbacks=[monitor, Batches(clock, 2)], verbose=0)
    if interval < 1:
        wait_for_no_sampler_thread()
        assert not sampler_threads()
        scalars = read_scalars(tmp_path / "hardware" / "evaluate")
        assert scalars["evaluate/gpu0/utilization_percent/mean"] == [(0, 30.0)]
    # A new model: under JAX, an evaluate left by an exception leaves its model's variables
    # detached (Keras writes them back only at the call's end).
    tiny_model().evaluate(x, y, batch_size=8, callbacks=[monitor, Batches(clock)], verbose=0)
    assert not sampler_threads()
    scalars = read_scalars(tmp_path / "hardware" / "evaluate")
    # The call cut short counts as call 0 (with the statistics of what its sampler thread read,
    # without figures), so the next one is call 1.
    cut_short = [(0, 30.0)] if interval < 1 else []  # no sample taken in an hour's interval
    assert scalars["evaluate/gpu0/utilization_percent/mean"] == [*cut_short, (1, 30.0)]
    assert scalars["evaluate/seconds"] == [(1, 4.0)]


def test_inference_after_fit_leaves_the_training_run_alone(tmp_path):
    clock = FakeClock()
    monitor = GPUMonitor(tmp_path, interval=3600, clock=clock, sources=_gpu)
    model = tiny_model()
    fit(model, [monitor], epochs=1)
    training = read_scalars(tmp_path / "hardware")
    x, _ = _inputs()
    model.predict(x, batch_size=32, callbacks=[monitor, Batches(clock)], verbose=0)
    assert read_scalars(tmp_path / "hardware" / "predict")["predict/seconds"] == [(0, 0.25)]
    assert {tag for tag in read_scalars(tmp_path / "hardware")} == set(training)
    assert not [tag for tag in training if tag.startswith(("predict/", "evaluate/"))]
