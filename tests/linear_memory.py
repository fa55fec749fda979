"""A Keras model whose training memory grows linearly with the batch, and its ground truth.

One ``Dense(WIDTH)`` layer: each example adds its activation and that activation's gradient,
2 x WIDTH float32 values (2 MiB at WIDTH=262144), on top of a fixed part (weights, optimizer,
fit machinery). Run as a script, it measures one batch size *alone*, in this fresh process:
two warm-up fits at small batch sizes first (TensorFlow loads kernels and fills caches once
per process, as the search's first trials do), then the peak RSS of a fit at the asked batch
size over its own start, read from the kernel's high-water mark (Linux), printed as JSON.

    python tests/linear_memory.py <batch_size>

Run as ``search``, it imports TensorFlow, reads a memory budget in bytes from stdin (so it can
start while the truth is measured), runs the batch-size search under test in this fresh process
and prints its trials.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

WIDTH = 262144
WARM_UP_BATCH_SIZES = (32, 64)


def build_model() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(WIDTH, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def examples() -> tf.data.Dataset:
    x = np.random.default_rng(0).random((64, 16), dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1]))


def _fit(batch_size: int) -> None:
    batches = examples().repeat().batch(batch_size, drop_remainder=True)
    # As find_batch_size's default trial with steps=1: a warm-up epoch, then a timed one.
    build_model().fit(batches.prefetch(tf.data.AUTOTUNE), epochs=2, steps_per_epoch=1, verbose=0)


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


def settled_rss() -> int:
    """RSS in bytes once Keras's session, garbage and the C heap's free pages are released."""
    keras.backend.clear_session()
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    return _status("VmRSS")


def measure_alone(batch_size: int) -> int:
    """Bytes a fit at ``batch_size`` adds at its peak, in this (fresh, warmed-up) process."""
    for size in WARM_UP_BATCH_SIZES:
        _fit(size)
    start = settled_rss()
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # reset the peak RSS to the current RSS
    _fit(batch_size)
    return _status("VmHWM") - start


def search(budget_bytes: int) -> dict:
    """find_batch_size over 96..1024 (4 trials) with ``budget_bytes`` over this process's
    settled RSS, as JSON-ready trials."""
    from tfthroughput import find_batch_size

    result = find_batch_size(
        build_model,
        examples(),
        min_batch_size=96,
        max_batch_size=1024,
        steps=1,
        max_trials=4,  # 96 192 384, then 288: bisection after a trial that did not fit
        memory_limit_mib=(settled_rss() + budget_bytes) // 2**20,
    )
    return {
        "trials": [[t.batch_size, t.memory_mib * 2**20, t.fits] for t in result.trials],
        "largest_fitting": result.largest_fitting,
        "text": str(result),
    }


if __name__ == "__main__":
    if sys.argv[1] == "search":  # python tests/linear_memory.py search, the budget on stdin
        print(json.dumps(search(int(sys.stdin.readline()))))
    else:
        size = int(sys.argv[1])
        print(json.dumps({"batch_size": size, "memory_bytes": measure_alone(size)}))
