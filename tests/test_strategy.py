"""The global batch size read from ``fit``, and the monitor, ``diagnose`` and
``find_batch_size`` under MirroredStrategy on two logical CPUs (in a child process: logical
devices must be set before TensorFlow initialises)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import tensorflow as tf
from events import read_scalars
from fake_nvml import run_json_with_fake_nvml
from fits import BATCH_SIZE, STEPS_PER_EPOCH, EpochDial, fake_gpus, tiny_model

from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.monitor.strategy import (
    Placement,
    dataset_batch_size,
    find_placement,
    global_batch_size,
)

EXAMPLES = tf.data.Dataset.range(40).map(lambda i: tf.cast(i, tf.float32))


@pytest.mark.parametrize(
    ("pipeline", "expected"),
    [
        (EXAMPLES.batch(8), 8),  # dynamic batch dimension: found by walking back
        (EXAMPLES.batch(8, drop_remainder=True), 8),  # static: read from element_spec
        (EXAMPLES.batch(8).map(lambda b: b * 2).prefetch(2), 8),
        (EXAMPLES.batch(8, num_parallel_calls=2).cache().shuffle(4).repeat().take(9), 8),
        (EXAMPLES.padded_batch(6).with_options(tf.data.Options()), 6),
        (EXAMPLES.map(lambda v: (v, v)).batch(tf.constant(5, tf.int64)).prefetch(1), 5),
        (EXAMPLES, None),  # not batched: its elements are scalars
        (EXAMPLES.batch(8).unbatch().batch(4), 4),
        (EXAMPLES.batch(8).unbatch(), None),
        (EXAMPLES.window(3).flat_map(lambda w: w.batch(3)), None),  # cannot be told
        (np.zeros((8, 3)), None),
        (None, None),
    ],
)
def test_dataset_batch_size(pipeline, expected):
    assert dataset_batch_size(pipeline) == expected


def test_no_strategy_is_one_replica_and_no_cluster():
    assert find_placement(None) == Placement()
    placement = find_placement(tiny_model())
    assert (placement.replicas, placement.multi_worker, placement.worker_name) == (1, False, None)
    assert placement.is_chief


def test_outside_fit_the_given_batch_size_is_used_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert global_batch_size(16, in_fit=False) == 16
        assert global_batch_size(None, in_fit=False) is None


def _examples_per_step(run_dir) -> list[float]:
    scalars = read_scalars(run_dir)
    return [
        rate * seconds / STEPS_PER_EPOCH
        for (_, rate), (_, seconds) in zip(
            scalars["epoch/examples_per_second"], scalars["epoch/seconds"], strict=True
        )
    ]


def _fit(tmp_path, data, monitor_batch_size=None, **fit_kwargs):
    dial = EpochDial()
    monitor = GPUMonitor(
        tmp_path, interval=0.05, sources=fake_gpus(dial), batch_size=monitor_batch_size
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_model().fit(data, epochs=2, callbacks=[dial, monitor], verbose=0, **fit_kwargs)
    return [str(w.message) for w in caught if issubclass(w.category, MonitoringWarning)]


def _rows():
    x = np.random.default_rng(0).normal(size=(STEPS_PER_EPOCH * BATCH_SIZE, 3))
    return x.astype("float32"), x.sum(axis=1, keepdims=True).astype("float32")


def test_a_pipeline_batched_without_drop_remainder_gives_examples_per_second(tmp_path):
    pipeline = tf.data.Dataset.from_tensor_slices(_rows()).batch(BATCH_SIZE).prefetch(2)
    assert _fit(tmp_path, pipeline) == []
    assert _examples_per_step(tmp_path / "hardware") == pytest.approx([BATCH_SIZE] * 2)


def test_a_generator_is_counted_as_it_feeds_fit(tmp_path):
    x, y = _rows()

    def batches():
        while True:
            for start in range(0, len(x), BATCH_SIZE):
                yield x[start : start + BATCH_SIZE], y[start : start + BATCH_SIZE]

    warned = _fit(tmp_path, batches(), steps_per_epoch=STEPS_PER_EPOCH)
    assert warned == []
    assert _examples_per_step(tmp_path / "hardware") == pytest.approx([BATCH_SIZE] * 2)


def test_a_pipeline_of_whole_batches_is_counted_without_a_batch_size(tmp_path):
    x, y = _rows()

    def batches():
        while True:
            for start in range(0, len(x), BATCH_SIZE):
                yield x[start : start + BATCH_SIZE], y[start : start + BATCH_SIZE]

    signature = (
        tf.TensorSpec((None, x.shape[1]), tf.float32),
        tf.TensorSpec((None, y.shape[1]), tf.float32),
    )
    dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
    assert _fit(tmp_path, dataset, steps_per_epoch=STEPS_PER_EPOCH) == []
    assert _examples_per_step(tmp_path / "hardware") == pytest.approx([BATCH_SIZE] * 2)


def test_a_batch_size_that_cannot_be_read_nor_counted_is_asked_for_once():
    # Where no count can be kept (a multi-worker cluster's share of the global batch) and the
    # fit's batch size cannot be read: here, no fit on the stack to read it from.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert global_batch_size(None, in_fit=True) is None
    assert [str(w.message) for w in caught] == [
        "GPUMonitor cannot tell how many examples each step of this fit takes (the data "
        "is not an array or a tf.data pipeline with a constant batch size), so "
        "epoch/examples_per_second is not logged: pass `batch_size=` (examples per step "
        "across every replica)."
    ]


def test_a_given_batch_size_that_disagrees_with_the_fit_is_kept_with_a_warning(tmp_path):
    x, y = _rows()
    warned = _fit(tmp_path, x, monitor_batch_size=4, y=y, batch_size=BATCH_SIZE)
    assert warned == [
        "GPUMonitor was given batch_size=4, but each step of this fit takes 8 examples (the "
        "global batch, across every replica); epoch/examples_per_second uses 4 as given."
    ]
    assert _examples_per_step(tmp_path / "hardware") == pytest.approx([4, 4])


# Two logical CPUs as the replicas of a MirroredStrategy, and two fake GPUs for the monitor to
# find (NVML knows nothing of TensorFlow's devices: every GPU visible to the process is
# sampled, so every local replica's GPU is). A layer records the batch each replica traces.
_MIRRORED = """
import os
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
from tfthroughput import GPUMonitor, diagnose, find_batch_size
from tfthroughput.monitor.cluster_exchange import all_gather_rows
from tfthroughput.monitor.strategy import find_placement

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
traced = []


class RecordBatch(keras.layers.Layer):
    def call(self, inputs):
        traced.append(inputs.shape[0])
        return inputs


def build():
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((4,)), RecordBatch(), keras.layers.Dense(8), keras.layers.Dense(1)]
        )
        model.compile("sgd", "mse")
    return model


x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
examples = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True)))
model = build()
model.fit(examples.batch(16).prefetch(2), epochs=2, verbose=0,
          callbacks=[GPUMonitor(os.environ["LOG_DIR"], interval=0.05)])
fit_traced = sorted({size for size in traced if size})
placement = find_placement(model)

traced.clear()
fresh = build()
before = [v.numpy().copy() for v in fresh.weights]
report = diagnose(fresh, examples.batch(16, drop_remainder=True), steps=2, repeats=1)
diagnose_traced = sorted({size for size in traced if size})
restored = all((a == v.numpy()).all() for a, v in zip(before, fresh.weights))

traced.clear()
search = find_batch_size(build, examples, min_batch_size=8, max_batch_size=16, steps=2)
emit({
    "exchanged": all_gather_rows(strategy, (3.0, 0.1, float("nan")), rank=1, workers=2),
    "replicas": placement.replicas,
    "worker": placement.worker_name,
    "fit_traced": fit_traced,
    "diagnose_batch_size": report.batch_size,
    "diagnose_traced": diagnose_traced,
    "restored": restored,
    "search_sizes": [size for size, _ in search.curve],
    "search_traced": sorted({size for size in traced if size}),
    "warned": warned(),
})
"""


@pytest.mark.slow
def test_mirrored_strategy_monitor_diagnose_and_batch_search(fake_nvml_dir, tmp_path):
    out = run_json_with_fake_nvml(
        _MIRRORED, fake_nvml_dir, env={"LOG_DIR": str(tmp_path)}, timeout=300
    )
    assert out["warned"] == []
    assert (out["replicas"], out["worker"]) == (2, None)
    # Two local replicas each carry half the row: the sum is the row, exactly.
    assert out["exchanged"][0] == [0.0, 0.0, 0.0]
    assert out["exchanged"][1][:2] == [3.0, 0.1] and math.isnan(out["exchanged"][1][2])
    # The monitor: both GPUs, the run where a single-process run goes, the global batch (16:
    # 8 per replica) found in a pipeline batched without drop_remainder.
    assert out["fit_traced"] == [8]
    scalars = read_scalars(tmp_path / "hardware")
    assert scalars["gpu0/utilization_percent/mean"] == [(0, 40.0), (1, 40.0)]
    assert scalars["gpu1/utilization_percent/mean"] == [(0, 41.0), (1, 41.0)]
    for (_, rate), (_, seconds) in zip(
        scalars["epoch/examples_per_second"], scalars["epoch/seconds"], strict=True
    ):
        assert rate * seconds == pytest.approx(64, rel=1e-5)  # 4 steps of 16 examples
    # diagnose: batch size is the dataset's (global) batch; each replica traced half of it.
    assert (out["diagnose_batch_size"], out["diagnose_traced"], out["restored"]) == (
        16,
        [8],
        True,
    )
    # find_batch_size: sizes are global batches; the replicas split them.
    assert out["search_sizes"] == [8, 16]
    assert out["search_traced"] == [4, 8]
