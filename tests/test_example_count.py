"""GPUMonitor counts the examples each epoch and each window really trained: 100 examples in
batches of 16 are 100 (six of 16 and a last one of 4), not 112, for every input ``fit`` takes;
read back from the event files of real fits as examples/s x seconds."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
from events import read_scalars
from fits import EpochDial, fake_gpus

from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.monitor.example_count import ExampleTally, examples_through

EXAMPLES = 100
BATCH = 16  # six batches of 16 and a last one of 4
WHOLE_EPOCH = [EXAMPLES, EXAMPLES]
# update_freq=4 steps: each epoch's windows are 4 batches of 16, then 2 of 16 and the 4.
WINDOWS = [64, 36] * 2


def _model() -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def _arrays(examples: int = EXAMPLES):
    x = np.random.default_rng(0).normal(size=(examples, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def _counted(run_dir, prefix: str) -> list[float]:
    """examples/s x seconds of each epoch (``prefix="epoch"``) or window, in order."""
    scalars = read_scalars(run_dir)
    rates = scalars.get(f"{prefix}/examples_per_second", [])
    seconds = scalars[f"{prefix}/seconds"]
    assert len(rates) == len(seconds), sorted(scalars)
    return [rate * took for (_, rate), (_, took) in zip(rates, seconds, strict=True)]


def _fit(tmp_path, data, *, update_freq=4, **fit_kwargs) -> list[str]:
    """A monitored fit of 2 epochs; the monitor's warnings."""
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, update_freq=update_freq, sources=fake_gpus(dial))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_kwargs.setdefault("epochs", 2)
        _model().fit(data, callbacks=[dial, monitor], verbose=0, **fit_kwargs)
    return [str(w.message) for w in caught if issubclass(w.category, MonitoringWarning)]


def _assert_exact(tmp_path, epochs=WHOLE_EPOCH, windows=WINDOWS) -> None:
    run = tmp_path / "hardware"
    assert _counted(run, "epoch") == pytest.approx(epochs, rel=1e-6)
    if windows is not None:
        assert _counted(run, "window") == pytest.approx(windows, rel=1e-6)


def test_arrays_whose_length_is_not_a_multiple_of_the_batch(tmp_path):
    x, y = _arrays()
    assert _fit(tmp_path, x, y=y, batch_size=BATCH) == []
    _assert_exact(tmp_path)


class ShortLastBatch(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y = _arrays()

    def __len__(self):
        return -(-EXAMPLES // BATCH)

    def __getitem__(self, index):
        part = slice(index * BATCH, (index + 1) * BATCH)
        return self.x[part], self.y[part]


def test_a_py_dataset_with_a_short_last_batch(tmp_path):
    # Unshuffled, so that the short batch is the epoch's last (fit shuffles the batches' order).
    assert _fit(tmp_path, ShortLastBatch(), shuffle=False) == []
    _assert_exact(tmp_path)


# Under JAX, Keras 3.15 with two worker threads sometimes hands the first epoch seven full
# batches and not the short one (112 examples trained, and counted as such): TensorFlow only.
@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.tensorflow)])
def test_a_py_dataset_with_workers_in_shuffled_order(tmp_path, workers):
    assert _fit(tmp_path, ShortLastBatch(workers=workers), update_freq="epoch") == []
    _assert_exact(tmp_path, windows=None)


def test_an_endless_generator_over_several_epochs(tmp_path):
    x, y = _arrays(16 * 64)

    def endless():
        while True:
            for i in range(0, len(x), 16):
                yield x[i : i + 16], y[i : i + 16]

    assert _fit(tmp_path, endless(), epochs=3, steps_per_epoch=5, update_freq="epoch") == []
    _assert_exact(tmp_path, epochs=[80] * 3, windows=None)


def test_steps_per_epoch_cutting_epochs_short_of_the_data(tmp_path):
    # Keras goes on through the arrays across epochs of 3 steps: batches 0-2, 3-5, then the
    # short batch 6 alone (the data ran out: Keras ends the epoch), then 0-2 again.
    x, y = _arrays()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Your input ran out of data", UserWarning)
        assert _fit(tmp_path, x, y=y, batch_size=BATCH, steps_per_epoch=3, epochs=4) == []
    _assert_exact(tmp_path, epochs=[48, 48, 4, 48], windows=None)


def _counts_made(tmp_path, data, **fit_kwargs) -> list:
    """The ``GraphCount`` of each pipeline a monitored fit counted (TensorFlow only); the fit
    warns nothing."""
    from tfthroughput.monitor import graph_count

    made = []
    counting = graph_count.GraphCount.counting

    def recorded(count, dataset):
        made.append(count)
        return counting(count, dataset)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph_count.GraphCount, "counting", recorded)
        assert _fit(tmp_path, data, **fit_kwargs) == []
    return made


@pytest.mark.tensorflow
def test_a_tf_data_pipeline_without_drop_remainder(tmp_path):
    # A batch over an input of known length: counted from its sizes and the timing's count.
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(_arrays()).batch(BATCH).prefetch(2)
    assert [count.state for count in _counts_made(tmp_path, dataset)] == [None]  # no stage
    _assert_exact(tmp_path)


@pytest.mark.tensorflow
def test_a_tf_data_pipeline_with_drop_remainder(tmp_path):
    # Its batch dimension is fixed: counted from that size and the timing's count of batches.
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(_arrays()).batch(BATCH, drop_remainder=True)
    assert [count.state for count in _counts_made(tmp_path, dataset)] == [None]
    _assert_exact(tmp_path, epochs=[96, 96], windows=[64, 32, 64, 32])


@pytest.mark.tensorflow
def test_steps_per_epoch_across_passes_of_a_finite_pipeline(tmp_path):
    # As with arrays, Keras goes on through the pipeline's 7 batches across epochs of 5 steps:
    # 5 x 16, then 16 and the short 4 (the data ran out: Keras ends the epoch), then a new
    # pass. Windows of 2 steps, and the epoch's last step alone.
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(_arrays()).shuffle(EXAMPLES).batch(BATCH)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Your input ran out of data", UserWarning)
        counts = _counts_made(tmp_path, dataset, steps_per_epoch=5, epochs=3, update_freq=2)
    assert [count.state for count in counts] == [None]
    windows = [32, 32, 16, 20, 32, 32, 16]
    _assert_exact(tmp_path, epochs=[80, 20, 80], windows=windows)


@pytest.mark.tensorflow
def test_a_map_after_the_batch_is_weighed_batch_by_batch(tmp_path):
    # The map may change a batch's size (this one keeps each batch's first 12 rows): counted by
    # the stage that weighs each batch, 12 x 6 and the short 4 per epoch.
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(_arrays()).batch(BATCH)
    dataset = dataset.map(lambda x, y: (x[:12], y[:12]))
    assert [count.state is None for count in _counts_made(tmp_path, dataset)] == [False]
    _assert_exact(tmp_path, epochs=[76, 76], windows=[48, 28, 48, 28])


@pytest.mark.tensorflow
def test_steps_per_epoch_on_a_repeated_pipeline(tmp_path):
    import tensorflow as tf

    # Epochs of 5 steps over passes of 7 batches: 5 x 16; then 16, 4, 16, 16, 16; then
    # 16, 16, 16, 4, 16. Windows of 2 steps, and the epoch's last step alone.
    dataset = tf.data.Dataset.from_tensor_slices(_arrays()).batch(BATCH).repeat()
    assert _fit(tmp_path, dataset, steps_per_epoch=5, epochs=3, update_freq=2) == []
    windows = [32, 32, 16, 20, 32, 16, 32, 20, 16]
    _assert_exact(tmp_path, epochs=[80, 68, 68], windows=windows)


@pytest.mark.tensorflow
@pytest.mark.parametrize("steps_per_execution", [1, 3])
def test_data_of_unknown_length_with_validation_keeps_its_last_window_exact(
    tmp_path, steps_per_execution
):
    # On data of unknown length Keras takes one step more per epoch than there are batches,
    # and the optimizer counts it: the training part ends at step 8 of 7 batches. That step,
    # and those a cut execution names, had no batch: the epoch's last window holds 36, not 64.
    import tensorflow as tf

    def unknown_length():
        return tf.data.Dataset.from_tensor_slices(_arrays()).filter(lambda x, y: True).batch(16)

    model = _model()
    model.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, update_freq=4, sources=fake_gpus(dial))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = {"epochs": 2, "callbacks": [dial, monitor], "verbose": 0}
        model.fit(unknown_length(), validation_data=unknown_length(), **fit)
    assert [w for w in caught if issubclass(w.category, MonitoringWarning)] == []
    _assert_exact(tmp_path)
    assert _counted(tmp_path / "hardware", "validation") == pytest.approx(WHOLE_EPOCH)


@pytest.mark.tensorflow
def test_a_from_generator_pipeline_of_whole_batches_needs_no_batch_size(tmp_path):
    import tensorflow as tf

    x, y = _arrays()

    def batches():
        for start in range(0, EXAMPLES, BATCH):
            yield x[start : start + BATCH], y[start : start + BATCH]

    signature = (tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((None, 1), tf.float32))
    dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
    assert _fit(tmp_path, dataset) == []
    _assert_exact(tmp_path)


def test_a_given_batch_size_is_used_as_given(tmp_path):
    x, y = _arrays(96)
    monitor = GPUMonitor(tmp_path, interval=0.05, batch_size=8, sources=fake_gpus(EpochDial()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MonitoringWarning)  # 8 is not the fit's 16: said so
        _model().fit(x, y, batch_size=BATCH, epochs=1, callbacks=[monitor], verbose=0)
    assert _counted(tmp_path / "hardware", "epoch") == pytest.approx([48])


def test_the_tally_reads_examples_through_any_recent_batch():
    tally = ExampleTally(recent=4)
    for size in (16, 16, 16, 4, 16, 16):
        tally.add(size)
    snapshot = tally.snapshot()
    # The last 4 sizes are kept: through batch 2 can be told, through batch 1 no longer.
    assert [examples_through(snapshot, n) for n in (6, 5, 4, 3, 2, 1)] == [84, 68, 52, 48, 32, None]
    # A step past the count had no batch (Keras named it without data): no more examples.
    assert examples_through(snapshot, 7) == 84
    assert examples_through(ExampleTally().snapshot(), 0) == 0


# MirroredStrategy over two logical CPUs (a child process: logical devices must be set before
# TensorFlow initialises): the global batch of 16 (8 per replica), the last one of 4 (2 each).
_MIRRORED = """
import os
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
from tfthroughput import GPUMonitor

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
x = np.random.default_rng(0).normal(size=(100, 3)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True)))
monitor = GPUMonitor(os.environ["LOG_DIR"], interval=0.05, update_freq=4)
model.fit(dataset.batch(16).prefetch(2), epochs=2, verbose=0, callbacks=[monitor])
emit({"replicas": strategy.num_replicas_in_sync, "warned": warned()})
"""


@pytest.mark.slow
@pytest.mark.tensorflow
def test_a_mirrored_strategy_global_batch(fake_nvml_dir, tmp_path):
    from fake_nvml import run_json_with_fake_nvml

    out = run_json_with_fake_nvml(
        _MIRRORED, fake_nvml_dir, env={"LOG_DIR": str(tmp_path)}, timeout=300
    )
    assert out == {"replicas": 2, "warned": []}
    _assert_exact(tmp_path)


def test_validation_evaluate_and_predict_count_their_short_last_batch(tmp_path):
    x, y = _arrays()
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, update_freq=4, sources=fake_gpus(dial))
    model = _model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=2,
            validation_data=(x, y),
            validation_batch_size=BATCH,
            callbacks=[dial, monitor],
            verbose=0,
        )
        model.evaluate(x, y, batch_size=BATCH, callbacks=[monitor], verbose=0)
        model.predict(x, batch_size=BATCH, callbacks=[monitor], verbose=0)
    assert [w for w in caught if issubclass(w.category, MonitoringWarning)] == []
    run = tmp_path / "hardware"
    assert _counted(run, "validation") == pytest.approx(WHOLE_EPOCH, rel=1e-6)
    assert _counted(run / "evaluate", "evaluate") == pytest.approx([EXAMPLES], rel=1e-6)
    assert _counted(run / "evaluate", "evaluate/window") == pytest.approx([64, 36], rel=1e-6)
    assert _counted(run / "predict", "predict") == pytest.approx([EXAMPLES], rel=1e-6)


@pytest.mark.parametrize(
    "kind",
    [
        "arrays",
        pytest.param("dataset", marks=pytest.mark.tensorflow),
        pytest.param("weighed", marks=pytest.mark.tensorflow),
    ],
)
def test_validation_steps_short_of_the_data_start_each_validation_afresh(tmp_path, kind):
    # Keras starts every validation at the data's first batch: 3 batches of 16 each epoch,
    # never the short last one (a count that went on through the data would reach it by the
    # third epoch: 4 + 16 + 16). Weighed (a map after the batching), the count runs ahead
    # of the step under the prefetch, into batches the validation never takes.
    x, y = _arrays()
    if kind == "arrays":
        validation = {"validation_data": (x, y), "validation_batch_size": BATCH}
    else:
        import tensorflow as tf

        batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
        if kind == "weighed":
            batches = batches.map(lambda features, target: (features * 2, target)).prefetch(3)
        validation = {"validation_data": batches}
    assert (
        _fit(tmp_path, x, y=y, batch_size=BATCH, epochs=3, validation_steps=3, **validation) == []
    )
    assert _counted(tmp_path / "hardware", "validation") == pytest.approx([48] * 3, rel=1e-6)


def test_steps_per_execution_past_the_data_counts_the_batches_there_were(tmp_path):
    # Executions of 3 over 7 batches: Keras's hooks name steps 3, 6 and 9, the last execution
    # cut short by the data after one batch (of 4). Ground truth: 100 examples, as at 1 step.
    x, y = _arrays()
    model = _model()
    model.compile("sgd", "mse", steps_per_execution=3)
    monitor = GPUMonitor(tmp_path, interval=0.05, update_freq=4, sources=fake_gpus(EpochDial()))
    validation = {"validation_data": (x, y), "validation_batch_size": BATCH}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = {"batch_size": BATCH, "epochs": 2, "callbacks": [monitor], "verbose": 0}
        model.fit(x, y, **fit, **validation)
        model.evaluate(x, y, batch_size=BATCH, callbacks=[monitor], verbose=0)
        model.predict(x, batch_size=BATCH, callbacks=[monitor], verbose=0)
    assert [w for w in caught if issubclass(w.category, MonitoringWarning)] == []
    run = tmp_path / "hardware"
    assert _counted(run, "epoch") == pytest.approx(WHOLE_EPOCH, rel=1e-6)
    assert _counted(run, "validation") == pytest.approx(WHOLE_EPOCH, rel=1e-6)
    for call in ("evaluate", "predict"):
        assert _counted(run / call, call) == pytest.approx([EXAMPLES], rel=1e-6), call
        windows = _counted(run / call, f"{call}/window")
        assert windows == pytest.approx([64, 36], rel=1e-6), call


@pytest.mark.tensorflow
def test_a_call_on_data_of_unknown_length_past_its_end_counts_the_batches_there_were(tmp_path):
    # No step count for Keras to name: the call's count cuts its hooks' last step (9) to 7.
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(_arrays()).filter(lambda x, y: True)
    model = _model()
    model.compile("sgd", "mse", steps_per_execution=3)
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(EpochDial()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras: the input ran out of data
        model.evaluate(dataset.batch(BATCH), callbacks=[monitor], verbose=0)
    assert _counted(tmp_path / "hardware" / "evaluate", "evaluate") == pytest.approx([EXAMPLES])


def test_the_sinks_get_the_whole_examples_of_each_epoch(tmp_path):
    from tfthroughput.sinks import Sink

    class Collect(Sink):
        def __init__(self):
            self.examples = []

        def write(self, measurement):
            self.examples.append((measurement.kind, measurement.examples))

    x, y = _arrays()
    sink = Collect()
    monitor = GPUMonitor(
        tmp_path, interval=0.05, update_freq=4, sources=fake_gpus(EpochDial()), sinks=[sink]
    )
    _model().fit(x, y, batch_size=BATCH, epochs=1, callbacks=[monitor], verbose=0)
    assert sink.examples == [("window", 64), ("window", 36), ("epoch", 100)]


def test_the_host_count_times_each_wait_for_a_batch_on_the_monitors_clock():
    # Under JAX and PyTorch the loop asks the epoch iterator for each batch on the host: the
    # count times that `next` on the clock it is given, and nothing of the step after it.
    from fakes import FakeClock

    from tfthroughput.monitor.example_count import HostCount

    clock = FakeClock()

    class EpochIterator:  # Keras's epoch iterator, as far as the count uses it
        def _get_iterator(self):
            for size in (4, 4, 2):
                clock.advance(0.03)  # making each batch costs 30 ms
                yield np.zeros((size, 3))

    iterator = EpochIterator()
    count = HostCount(iterator, clock)
    for _ in iterator._get_iterator():
        clock.advance(0.01)  # the step: 10 ms, not waited for
    assert count.waited() == pytest.approx(3 * 0.03)
    assert count.snapshot()[:2] == (3, 10)
    count.detach()
    assert "_get_iterator" not in vars(iterator)
