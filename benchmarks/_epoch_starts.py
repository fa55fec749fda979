"""A callback that notes when each epoch of a ``fit`` starts and when the ``fit`` ends, as a
user's own timing callback would: epoch ``i`` took ``starts[i + 1] - starts[i]``."""

from __future__ import annotations

import time

import keras


class EpochStarts(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.starts = []

    def on_epoch_begin(self, epoch, logs=None):
        self.starts.append(time.perf_counter())

    def on_train_end(self, logs=None):
        self.starts.append(time.perf_counter())
