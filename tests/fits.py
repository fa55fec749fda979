"""Small real Keras fits for the monitor tests: a tiny model, its data, fake GPUs whose
readings follow the epoch, and a callback that fails at a chosen step."""

from __future__ import annotations

import threading
import time

import keras
import numpy as np
from fakes import FakeSource

STEPS_PER_EPOCH = 4
BATCH_SIZE = 8


def tiny_model() -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS_PER_EPOCH * BATCH_SIZE, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def fit(model, callbacks, epochs=2, **kwargs):
    x, y = data()
    return model.fit(
        x, y, batch_size=BATCH_SIZE, epochs=epochs, callbacks=callbacks, verbose=0, **kwargs
    )


class EpochDial(keras.callbacks.Callback):
    """Sets the value the fake GPUs report for the epoch that is starting (listed first)."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch = -1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch


def fake_gpus(dial: EpochDial, offset: float = 0.0):
    """Two GPUs and a host whose readings depend only on the current epoch."""

    def factory():
        return [
            FakeSource(
                "gpu0",
                lambda n: {
                    "utilization_percent": 10.0 * (dial.epoch + 1) + offset,
                    "power_watts": 100.0 + dial.epoch,
                },
            ),
            FakeSource("gpu1", lambda n: {"utilization_percent": 50.0 + offset}),
            FakeSource("host", {"cpu_percent": 75.0}),
        ]

    return factory


class RaiseDuringEpoch(keras.callbacks.Callback):
    def __init__(self, epoch: int, batch: int, error: BaseException) -> None:
        super().__init__()
        self.at = (epoch, batch)
        self.error = error
        self.epoch = -1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            time.sleep(0.3)  # let the sampler take a few samples inside the failing epoch
            raise self.error


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tfthroughput-sampler"]


def wait_for_no_sampler_thread(timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while sampler_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
