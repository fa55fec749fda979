"""GPUMonitor's examples/s for a keras.utils.PyDataset and a Python generator (Keras knows no
batch size for either): counted from the batches that reach fit, partial last batch included;
and the warning for an epoch that is not a whole number of executions."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
from events import read_scalars
from fits import EpochDial, fake_gpus

from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.monitor.batch_count import BatchCounter
from tfthroughput.monitor.execution_check import partial_execution_message

EXAMPLES = 100  # batches of 32: 32, 32, 32 and a last one of 4
BATCH = 32


def _model(steps_per_execution: int = 1) -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    return model


def _arrays(examples: int = EXAMPLES):
    x = np.random.default_rng(0).normal(size=(examples, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


class Batches(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y = _arrays()

    def __len__(self):
        return -(-EXAMPLES // BATCH)

    def __getitem__(self, index):
        part = slice(index * BATCH, (index + 1) * BATCH)
        return self.x[part], self.y[part]


def _examples_per_epoch(run_dir) -> list[float]:
    scalars = read_scalars(run_dir)
    return [
        examples_per_second * seconds
        for (_, seconds), (_, examples_per_second) in zip(
            scalars["epoch/seconds"], scalars["epoch/examples_per_second"], strict=True
        )
    ]


def _monitored_fit(tmp_path, data, **fit_kwargs) -> list[warnings.WarningMessage]:
    dial = EpochDial()
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(dial))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _model().fit(data, callbacks=[dial, monitor], verbose=0, **fit_kwargs)
    return [w for w in caught if issubclass(w.category, MonitoringWarning)]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_py_dataset_gets_the_examples_it_trained_per_second(tmp_path, workers):
    caught = _monitored_fit(tmp_path, Batches(workers=workers), epochs=2)

    assert caught == []
    assert _examples_per_epoch(tmp_path / "hardware") == pytest.approx([EXAMPLES] * 2, rel=1e-6)


def test_an_endless_generator_over_several_epochs(tmp_path):
    x, y = _arrays(16 * 64)

    def endless():
        while True:
            for i in range(0, len(x), 16):
                yield x[i : i + 16], y[i : i + 16]

    caught = _monitored_fit(tmp_path, endless(), epochs=3, steps_per_epoch=5)

    assert caught == []
    assert _examples_per_epoch(tmp_path / "hardware") == pytest.approx([80] * 3, rel=1e-6)


def test_the_adapter_gets_its_own_method_back():
    class GeneratorDataAdapter:  # stands in for Keras's: `generator` is an instance attribute
        def __init__(self):
            self.generator = lambda: iter([(np.zeros((5, 2)),), (np.zeros((3, 2)),)])

    adapter = GeneratorDataAdapter()
    own = adapter.generator
    counter = BatchCounter.attach(adapter)
    assert counter.first_batch_size is None
    assert [len(batch[0]) for batch in adapter.generator()] == [5, 3]
    assert counter.take_epoch_batch_size() == 4.0
    assert counter.first_batch_size == 5
    assert counter.take_epoch_batch_size() is None  # nothing counted since
    counter.detach()
    assert adapter.generator is own
    assert BatchCounter.attach(object()) is None  # arrays, tf.data: Keras knows their size


def test_an_epoch_of_part_of_an_execution_is_warned_about_once(tmp_path):
    x, y = _arrays(32 * 8)
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(EpochDial()))
    model = _model(steps_per_execution=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=8, epochs=2, steps_per_epoch=6, callbacks=[monitor], verbose=0)
        model.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=8, callbacks=[monitor], verbose=0)
    messages = [str(w.message) for w in caught if issubclass(w.category, MonitoringWarning)]
    assert messages == [partial_execution_message(6, 4)]
    assert messages[0].startswith(
        "fit(steps_per_epoch=6) with steps_per_execution=4 trains 8 steps per epoch, not 6"
    )
    # What the warning says is what Keras does: 2 epochs of 8 steps, then one of 8.
    assert int(model.optimizer.iterations.numpy()) == 24
    assert partial_execution_message(None, 4) is None  # the epoch ends with the data
