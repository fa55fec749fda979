"""``input/wait_percent`` on known costs.

The arithmetic (:mod:`tfthroughput.monitor.input_wait`) is checked on injected readings. The
TensorFlow stage that times the wait runs on the host's real clock inside the input graph, so
its fits use real sleeps of known length, and every bound is one the run cannot break however
loaded the machine is: with an input that sleeps ``S`` per batch and nothing prefetched, each
of the ``n`` batches is waited for at least ``S``, so the share is at least ``n S / T`` of the
phase's own time ``T`` (read back from the same event file); a step that sleeps ``C`` after
its batch came is not waited through, so the share is at most ``(T - n C) / T``. With ``S``
four times ``C`` the band is a few points wide around the known share.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from events import read_scalars, summary_values
from readme import logged_tags_table

from tfthroughput.monitor.input_wait import TAG, PhaseWait, wait_percent, waited_reader

SLEEP = 0.04  # seconds the input spends per batch
STEP = 0.01  # seconds the step spends per batch
BATCHES = 12
SLACK = 1.0  # points: clock reads around the phase's edges


def test_share_is_clamped_and_none_without_time():
    assert wait_percent(0.25, 1.0) == 25.0
    assert wait_percent(2.0, 1.0) == 100.0
    assert wait_percent(-0.1, 1.0) == 0.0
    assert wait_percent(0.1, 0.0) is None


def test_windows_and_phase_read_the_running_total():
    total = [0.0]
    wait = PhaseWait(lambda: total[0])
    wait.begin()
    total[0] = 0.3
    assert wait.window(1.0) == pytest.approx(30.0)
    total[0] = 0.4
    assert wait.window(0.5) == pytest.approx(20.0)
    assert wait.phase(1.5) == pytest.approx(100 * 0.4 / 1.5)


def test_no_reader_or_a_failing_one_gives_no_figure():
    assert PhaseWait(None).window(1.0) is None

    def broken():
        raise RuntimeError("variable gone")

    wait = PhaseWait(broken)
    wait.begin()
    assert wait.window(1.0) is None and wait.phase(1.0) is None


def test_what_is_not_measured_is_said_once_and_gives_no_reader(caplog):
    class Untimed:  # a count under a strategy that prefetches onto its devices
        timed = False

    with caplog.at_level("WARNING", logger="tfthroughput"):
        assert waited_reader(Untimed(), "a phase of this test", False) is None
        assert waited_reader(Untimed(), "a phase of this test", False) is None
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and TAG in lines[0] and "strategy" in lines[0]


def test_the_tag_table_documents_the_tag():
    rows = {tag: unit for tag, unit, _ in logged_tags_table()}
    assert rows[f"`{TAG}`"] == "%"


# Real fits under TensorFlow -------------------------------------------------------------------

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tfthroughput import GPUMonitor  # noqa: E402
from tfthroughput.monitor.graph_count import GraphCount  # noqa: E402

pytestmark = pytest.mark.tensorflow


def _rows(n=BATCHES * 4):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 4)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")


def _sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def _slow_map(x, y):
    slowed = tf.numpy_function(lambda a: _sleep_then(SLEEP, a), [x], tf.float32)
    slowed.set_shape(x.shape)
    return slowed, y


def _sequential(dataset):
    """``dataset`` with tf.data's own injected prefetch switched off: nothing runs ahead."""
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return dataset.with_options(options)


def _slow_dataset(prefetch=False):
    dataset = tf.data.Dataset.from_tensor_slices(_rows()).batch(4).map(_slow_map)
    return dataset.prefetch(2) if prefetch else _sequential(dataset)


class TimedStep(keras.Model):
    """One dense layer whose training step sleeps ``STEP`` once its batch is in."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)

    def _after_sleep(self, x):
        # The sleep depends on the batch, so it runs after the batch came, never beside it.
        slept = tf.numpy_function(lambda a: _sleep_then(STEP, a), [x], tf.float32)
        slept.set_shape(x.shape)
        return slept

    def train_step(self, data):
        x, y = data
        return super().train_step((self._after_sleep(x), y))


def _model(steps_per_execution=1):
    model = TimedStep()
    model.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    return model


def _monitor(tmp_path, **kwargs):
    return GPUMonitor(log_dir=tmp_path, run_name="hw", interval=0.05, sources=list, **kwargs)


def _assert_known_share(share, seconds, batches):
    """Nothing prefetched: every sleep of the input waited for, no sleep of the step."""
    low = 100 * batches * SLEEP / seconds
    high = 100 * (seconds - batches * STEP) / seconds
    assert low - SLACK <= share <= high + SLACK, (share, low, high)


def _assert_input_bound_ahead(share, seconds, batches):
    """The input made ahead while the step sleeps: never the step's sleep, and at least the
    first batch, which no iterator made before the epoch began (how much of each later batch
    is waited for depends on the step's real cost, which load stretches)."""
    low = 100 * SLEEP / seconds
    high = 100 * (seconds - batches * STEP) / seconds
    assert low - SLACK <= share <= high + SLACK, (share, low, high)


def _slowly(seconds, calls=None):
    def slow(element):
        def sleep(value):
            if calls is not None:
                calls.append(value)
            return _sleep_then(seconds, value)

        return tf.numpy_function(sleep, [element], tf.int64)

    return slow


def test_the_count_is_the_steps_and_the_input_still_runs_ahead():
    # tf.data injects a prefetch after a pipeline that does not end in one: the counted
    # pipeline keeps it for the user's stages, and counts each batch as the step takes it
    # (running ahead, a count would pull a batch early across an epoch's end).
    mapped = []
    count = GraphCount(recent=4)
    dataset = count.counting(tf.data.Dataset.range(6).batch(1).map(_slowly(0.02, mapped)))
    take = tf.function(lambda iterator: iterator.get_next())
    batches = iter(dataset)
    for taken in range(1, 5):
        take(batches)
        time.sleep(0.1)  # long enough for the next batch to be made ahead
        assert count.snapshot()[0] == taken
        assert len(mapped) == taken + 1


def test_a_sequential_input_is_counted_as_the_step_takes_it():
    count = GraphCount(recent=4)
    dataset = count.counting(_sequential(tf.data.Dataset.range(6).batch(1).map(_slowly(0.01))))
    take = tf.function(lambda iterator: iterator.get_next())
    batches = iter(dataset)
    for taken in range(1, 5):
        take(batches)
        time.sleep(0.05)
        assert count.snapshot()[0] == taken


def test_a_sequential_input_is_waited_for_all_along():
    count = GraphCount(recent=4)
    dataset = count.counting(_sequential(tf.data.Dataset.range(8).batch(1).map(_slowly(0.02))))
    start = time.monotonic()
    for _ in dataset:
        time.sleep(0.01)
    assert 8 * 0.02 <= count.waited() <= time.monotonic() - start


def test_a_prefetched_input_made_while_the_consumer_works_is_not_waited_for():
    count = GraphCount(recent=4)
    dataset = count.counting(tf.data.Dataset.range(8).batch(1).map(_slowly(0.02)).prefetch(8))
    batches = iter(dataset)
    next(batches)
    first = count.waited()
    for _ in range(7):
        time.sleep(0.05)  # the input makes the next batch meanwhile
        next(batches)
    assert count.waited() - first < 7 * 0.02 / 2


def test_an_input_bound_fit_spends_its_known_share_waiting(tmp_path, capsys):
    _model().fit(
        _slow_dataset(), epochs=1, verbose=2, callbacks=[_monitor(tmp_path, update_freq=4)]
    )
    scalars = read_scalars(tmp_path / "hw")
    # Its reading: a text entry for the epoch, and the fit's line when it ends (verbose).
    [(step, entry)] = summary_values(tmp_path / "hw", "text")
    text = entry.tensor.string_val[0].decode()
    assert (step, entry.tag) == (0, "input/reading") and text.startswith("input-bound (")
    assert f"GPUMonitor: {text}" in capsys.readouterr().out.splitlines()
    [(_, share)] = scalars["input/wait_percent"]
    [(_, seconds)] = scalars["epoch/seconds"]
    _assert_known_share(share, seconds, BATCHES)
    windows = scalars["window/input/wait_percent"]
    assert [step for step, _ in windows] == [4, 8, 12]
    for (_, window_share), (_, window_seconds) in zip(
        windows, scalars["window/seconds"], strict=True
    ):
        _assert_known_share(window_share, window_seconds, 4)


def test_several_steps_per_execution(tmp_path):
    _model(steps_per_execution=4).fit(
        _slow_dataset(), epochs=1, verbose=0, callbacks=[_monitor(tmp_path)]
    )
    scalars = read_scalars(tmp_path / "hw")
    [(_, share)] = scalars["input/wait_percent"]
    [(_, seconds)] = scalars["epoch/seconds"]
    _assert_known_share(share, seconds, BATCHES)


def test_a_prefetched_input_slower_than_the_step(tmp_path):
    _model().fit(_slow_dataset(prefetch=True), epochs=1, verbose=0, callbacks=[_monitor(tmp_path)])
    scalars = read_scalars(tmp_path / "hw")
    [(_, share)] = scalars["input/wait_percent"]
    [(_, seconds)] = scalars["epoch/seconds"]
    _assert_input_bound_ahead(share, seconds, BATCHES)


def test_a_prefetched_input_faster_than_the_step_is_near_zero(tmp_path, capsys):
    x, y = _rows(48 * 4)  # 48 steps of at least 10 ms: the first batch's wait weighs little
    _model().fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[_monitor(tmp_path)])
    [(_, share)] = read_scalars(tmp_path / "hw")["input/wait_percent"]
    assert share < 25  # each batch sliced from memory during a 10 ms step (input-bound: > 75)
    [(_, entry)] = summary_values(tmp_path / "hw", "text")
    shown = re.search(r"\((\d+) % of the time waiting", entry.tensor.string_val[0].decode())
    assert abs(int(shown[1]) - share) <= 0.5 + 1e-3  # the tag's value, rounded for reading
    assert "GPUMonitor" not in capsys.readouterr().out  # verbose=0: no line


def test_a_generator_and_a_py_dataset_with_and_without_workers(tmp_path):
    x, y = _rows()

    def batches():
        while True:
            for start in range(0, len(x), 4):
                time.sleep(SLEEP)
                yield x[start : start + 4], y[start : start + 4]

    class Slow(keras.utils.PyDataset):
        def __len__(self):
            return BATCHES

        def __getitem__(self, index):
            time.sleep(SLEEP)
            return x[index * 4 : index * 4 + 4], y[index * 4 : index * 4 + 4]

    # With workers, Keras's enqueuer makes batches on threads of its own, several at a time,
    # from the epoch's start: in the first epoch the step's tracing (a few hundred ms, inside
    # the epoch's clock) gives them time to have the first batch ready when the step first
    # asks, so the first-batch bound holds from the second epoch on (the enqueuer stops at
    # each epoch's end and starts again at the next one's).
    inputs = (
        ("generator", batches(), 1),
        ("py_dataset", Slow(), 1),
        ("py_dataset_workers", Slow(workers=3), 2),
    )
    for name, data, epochs in inputs:
        monitor = GPUMonitor(log_dir=tmp_path, run_name=name, interval=0.05, sources=list)
        _model().fit(data, epochs=epochs, steps_per_epoch=BATCHES, verbose=0, callbacks=[monitor])
        scalars = read_scalars(tmp_path / name)
        share = scalars["input/wait_percent"][-1][1]
        seconds = scalars["epoch/seconds"][-1][1]
        _assert_input_bound_ahead(share, seconds, BATCHES)  # Keras prefetches all three


def test_validation_evaluate_and_predict_have_their_own_share(tmp_path):
    model = _model()
    x, y = _rows()
    monitor = _monitor(tmp_path, update_logs=True)
    history = model.fit(
        x,
        y,
        batch_size=4,
        epochs=1,
        verbose=0,
        validation_data=_slow_dataset(),
        callbacks=[monitor],
    )
    scalars = read_scalars(tmp_path / "hw")
    [(_, training)] = scalars["input/wait_percent"]
    [(_, validation)] = scalars["validation/input/wait_percent"]
    [(_, validation_seconds)] = scalars["validation/seconds"]
    assert training < 25  # arrays sliced from memory during the step
    assert validation >= 100 * BATCHES * SLEEP / validation_seconds - SLACK
    assert history.history["input_wait_percent"] == [pytest.approx(training)]
    assert history.history["val_input_wait_percent"] == [pytest.approx(validation)]
    model.predict(_slow_dataset(), verbose=0, callbacks=[monitor])
    predict = read_scalars(tmp_path / "hw" / "predict")
    [(_, share)] = predict["predict/input/wait_percent"]
    [(_, seconds)] = predict["predict/seconds"]
    assert share >= 100 * BATCHES * SLEEP / seconds - SLACK


def test_input_wait_off_counts_every_example_off_the_steps_thread_and_writes_no_share(
    tmp_path, caplog
):
    x, y = _rows(10 * 4 + 2)  # 10 batches of 4 and a short one of 2
    monitor = _monitor(tmp_path, input_wait=False, update_freq=5)
    with caplog.at_level("WARNING", logger="tfthroughput"):
        _model().fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[monitor])
    scalars = read_scalars(tmp_path / "hw")
    assert not [tag for tag in scalars if tag.endswith(TAG)]
    [(_, examples_per_second)] = scalars["epoch/examples_per_second"]
    [(_, seconds)] = scalars["epoch/seconds"]
    assert examples_per_second * seconds == pytest.approx(42)  # the short batch counted
    assert not [record for record in caplog.records if TAG in record.getMessage()]  # asked for

    # The counting stage alone, which may run ahead: no prefetch(0) holding it to the step.
    count = GraphCount(recent=4, timed=False)
    assert type(count.counting(tf.data.Dataset.range(4).batch(2))).__name__ == "_MapDataset"
