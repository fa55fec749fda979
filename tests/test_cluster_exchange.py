"""GPUMonitor under MultiWorkerMirroredStrategy, for real: two worker processes on loopback.

Each worker trains the same tiny model with ``fit`` and a GPUMonitor writing into its own
``log_dir`` (no shared folder). Worker 0 (the chief) sees one GPU through the fake NVML library
(without GPM counters: the fake's fixed SM activity would not follow the real load); worker 1
has NVML switched off and sleeps in its input, so it holds the chief back at every step. The
test reads both workers' hardware runs and the chief's cluster run back.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from events import read_scalars
from fake_nvml import ENV_VARS
from loopback_cluster import run_cluster

from tfthroughput import MonitoringWarning
from tfthroughput.monitor.cluster_exchange import ClusterExchange, all_gather_rows
from tfthroughput.monitor.cluster_summary import STRAGGLER_MIN_LEAD
from tfthroughput.monitor.strategy import Placement

REPO = Path(__file__).resolve().parents[1]
EPOCHS = 3
GLOBAL_BATCH = 32
STEPS_PER_EPOCH = 4
INPUT_SLEEP = 0.01  # seconds per example, worker 1 only
# Seconds for the whole cluster; every process is killed past it. Generous: on a fresh venv
# both workers compile TensorFlow's modules at their first import, on a machine running the
# suite's other tests.
DEADLINE = 300

# Keras 3.15's own train step cannot run under MultiWorkerMirroredStrategy: it reduces the
# data batch and the scalar loss with calls that collective all-reduce rejects
# (keras-team/keras#20585, tensorflow/tensorflow#72388). A model with its own `train_step`
# (Keras's documented way to customise `fit`) and a single-tensor input avoids both.
_WORKER = """
import json, os, sys, time, warnings
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
import keras
import urllib.request
from prometheus_client.parser import text_string_to_metric_families
from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.sinks import PrometheusSink

SLEEP = float(os.environ["INPUT_SLEEP"])


class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8)
        self.head = keras.layers.Dense(1)

    def call(self, rows):
        return self.head(self.hidden(rows[:, :4]))

    def train_step(self, rows):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(rows, training=True)[:, 0] - rows[:, 4]))
            scaled = loss / tf.distribute.get_strategy().num_replicas_in_sync
        self.optimizer.apply(tape.gradient(scaled, self.trainable_variables),
                             self.trainable_variables)
        return {"loss": tf.reshape(loss, [1])}


class Scrape(keras.callbacks.Callback):
    # Reads this worker's Prometheus endpoint at each epoch's end, after the monitor's write.
    samples = []

    def __init__(self, sink):
        super().__init__()
        self.sink = sink

    def on_epoch_end(self, epoch, logs=None):
        with urllib.request.urlopen(self.sink.url, timeout=10) as response:
            page = response.read().decode()
        Scrape.samples = [[s.name, s.labels, s.value]
                          for family in text_string_to_metric_families(page)
                          for s in family.samples]


def slow(row):
    row = tf.py_function(lambda r: (time.sleep(SLEEP), r)[1], [row], tf.float32)
    row.set_shape([5])
    return row


rows = np.random.default_rng(0).random((GLOBAL_BATCH * STEPS, 5)).astype("float32")
data = tf.data.Dataset.from_tensor_slices(rows)
if SLEEP:
    data = data.map(slow)
data = data.batch(GLOBAL_BATCH).prefetch(2)
with strategy.scope():
    model = Regressor()
    model(tf.zeros([1, 5]))
    model.compile(optimizer="sgd")
sink = PrometheusSink(port=0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model.fit(data, epochs=EPOCHS, verbose=0,
              callbacks=[GPUMonitor(os.environ["LOG_DIR"], interval=0.05, sinks=[sink]),
                         Scrape(sink)])
print("RESULT " + json.dumps({
    "prometheus": Scrape.samples,
    "warned": [str(w.message) for w in caught if issubclass(w.category, MonitoringWarning)],
    "weights": [float(v) for v in model.weights[0].numpy().ravel()[:4]],
}), flush=True)
os._exit(0)  # skip interpreter teardown: collective ops' threads may outlive it
"""


def _run_cluster(tmp_path: Path, fake_nvml_dir: Path) -> list[dict]:
    common = {
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        **dict.fromkeys(ENV_VARS),  # the fake library's switches: unset unless given
    }
    envs = [
        {  # the chief: one fake GPU (GPU-Util 40 %)
            **common,
            "LD_LIBRARY_PATH": str(fake_nvml_dir),
            "FAKE_NVML_DEVICE_COUNT": "1",
            "INPUT_SLEEP": "0",
            "LOG_DIR": str(tmp_path / "worker0"),
        },
        {
            **common,
            "TFTHROUGHPUT_DISABLE_NVML": "1",
            "INPUT_SLEEP": str(INPUT_SLEEP),
            "LOG_DIR": str(tmp_path / "worker1"),
        },
    ]
    code = f"EPOCHS, GLOBAL_BATCH, STEPS = {EPOCHS}, {GLOBAL_BATCH}, {STEPS_PER_EPOCH}\n" + _WORKER
    finished = run_cluster(code, envs, DEADLINE)
    report = "\n".join(
        f"worker {i} ({code}):\n{output}" for i, (code, output) in enumerate(finished)
    )
    results = []
    for returncode, output in finished:
        lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
        assert returncode == 0 and lines, report
        results.append(json.loads(lines[-1].removeprefix("RESULT ")))
    return results


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory, fake_nvml_dir) -> tuple[list[dict], Path]:
    """One two-worker run for the checks below (it takes most of this file's time)."""
    folder = tmp_path_factory.mktemp("cluster")
    return _run_cluster(folder, fake_nvml_dir), folder


@pytest.mark.slow
def test_two_workers_exchange_summaries_and_the_chief_names_the_straggler(cluster_run):
    results, tmp_path = cluster_run
    assert results[0]["weights"] == results[1]["weights"]  # they really trained in sync
    assert results[0]["warned"] == [] and results[1]["warned"] == [
        "GPU metrics are off: NVML is switched off by TFTHROUGHPUT_DISABLE_NVML. Host CPU/RAM "
        "metrics are still logged."
    ]

    # Each worker's own hardware run, in its own log_dir; the cluster run only on the chief.
    assert sorted(os.listdir(tmp_path / "worker0")) == ["cluster", "hardware"]
    assert os.listdir(tmp_path / "worker1") == ["hardware"]
    chief = read_scalars(tmp_path / "worker0" / "hardware" / "worker_0")
    other = read_scalars(tmp_path / "worker1" / "hardware" / "worker_1")
    epochs = list(range(EPOCHS))
    assert chief["gpu0/utilization_percent/mean"] == [(e, 40.0) for e in epochs]
    assert not [tag for tag in other if tag.startswith("gpu")]
    for run in (chief, other):
        for (_, seconds), (_, rate) in zip(
            run["epoch/seconds"], run["epoch/examples_per_second"], strict=True
        ):  # the global batch, read from the pipeline (batched without drop_remainder)
            assert rate * seconds == pytest.approx(STEPS_PER_EPOCH * GLOBAL_BATCH, rel=1e-5)
    assert [step for step, _ in other["input/python_percent/mean"]] == epochs

    cluster = read_scalars(tmp_path / "worker0" / "cluster")
    for statistic in ("min", "mean", "max"):
        assert cluster[f"cluster/gpu_utilization_percent/{statistic}"] == [
            (e, 40.0) for e in epochs
        ]
    assert not [tag for tag in cluster if "sm_activity" in tag]  # no worker reads GPM
    assert cluster["cluster/workers"] == [(e, 2.0) for e in epochs]
    assert cluster["cluster/gpus"] == [(e, 1.0) for e in epochs]
    assert cluster["worker_0/gpus"] == [(e, 1.0) for e in epochs]
    assert cluster["worker_1/gpus"] == [(e, 0.0) for e in epochs]  # no NVML, still taking part
    assert cluster["worker_0/gpu_utilization_percent"] == [(e, 40.0) for e in epochs]
    assert "worker_1/gpu_utilization_percent" not in cluster
    # What each worker measured of itself reaches the chief unchanged: its epoch time, its
    # process's CPU share and its input's Python share, as its own run logged them.
    cores = len(os.sched_getaffinity(0))  # what each worker's exchange divides CPU time by
    for name, run in (("worker_0", chief), ("worker_1", other)):
        assert dict(cluster[f"{name}/epoch_seconds"]) == pytest.approx(dict(run["epoch/seconds"]))
        cpu_share = {e: v / cores for e, v in run["host/process_cpu_percent/mean"]}
        assert dict(cluster[f"{name}/process_cpu_share_percent"]) == pytest.approx(cpu_share)
    assert dict(cluster["worker_1/input_python_percent"]) == pytest.approx(
        dict(other["input/python_percent/mean"])
    )
    # Each worker's busy share: its input's Python share where its input runs Python (the
    # sleeping worker), else its CPU share (the chief: no GPM, no Python input). The straggler
    # is the busier, where it leads the other by STRAGGLER_MIN_LEAD points (the rule itself is
    # checked on known rows in test_cluster_summary.py; here, on what the workers measured).
    assert cluster["worker_0/input_python_percent"] == [(e, 0.0) for e in epochs]
    assert cluster["worker_0/busy_percent"] == cluster["worker_0/process_cpu_share_percent"]
    assert cluster["worker_1/busy_percent"] == cluster["worker_1/input_python_percent"]
    for epoch in epochs:
        busy = [dict(cluster[f"worker_{rank}/busy_percent"])[epoch] for rank in (0, 1)]
        lead = max(busy) - min(busy)
        named = busy.index(max(busy)) if lead >= STRAGGLER_MIN_LEAD else -1
        assert dict(cluster["straggler/rank"])[epoch] == named
        assert dict(cluster["straggler/lead_percent"])[epoch] == pytest.approx(lead)
    exchange = [seconds for _, seconds in cluster["cluster/exchange_seconds"]]
    assert len(exchange) == EPOCHS and all(0 < seconds < 30 for seconds in exchange)  # no hang


@pytest.mark.slow
def test_each_workers_prometheus_endpoint_is_labelled_with_its_task(cluster_run):
    results, folder = cluster_run
    for index, result in enumerate(results):
        series = {
            (name, tuple(sorted(labels.items()))): value
            for name, labels, value in result["prometheus"]
        }
        task = {"run": f"worker{index}", "task": f"worker_{index}"}
        counted = tuple(sorted(task.items()))
        assert series[("tfthroughput_steps_total", counted)] == EPOCHS * STEPS_PER_EPOCH
        assert series[("tfthroughput_examples_total", counted)] == (
            EPOCHS * STEPS_PER_EPOCH * GLOBAL_BATCH
        )
        # With update_freq="epoch" the last epoch is the latest window: its event-file value.
        run = read_scalars(folder / f"worker{index}" / "hardware" / f"worker_{index}")
        rate = series[("tfthroughput_examples_per_second", counted)]
        assert float(np.float32(rate)) == run["epoch/examples_per_second"][-1][1]
        gpu = [key for key in series if key[0] == "tfthroughput_gpu_utilization_percent"]
        if index == 0:  # the chief's one fake GPU
            mean = tuple(sorted({**task, "gpu": "0", "statistic": "mean"}.items()))
            assert series[("tfthroughput_gpu_utilization_percent", mean)] == 40.0
        else:  # NVML switched off: no GPU series
            assert gpu == []
        assert {dict(labels)["task"] for _, labels in series} == {f"worker_{index}"}


def test_a_failed_exchange_is_warned_about_once_and_not_retried(tmp_path):
    placement = Placement(
        replicas=2, worker_names=("worker_0", "worker_1"), rank=0, strategy=object()
    )
    exchange = ClusterExchange(placement, str(tmp_path))
    with pytest.warns(MonitoringWarning, match="could not exchange epoch 0's summary") as caught:
        assert exchange.epoch_end(0, {}, 1.0) is None
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert exchange.epoch_end(1, {}, 1.0) is None
    exchange.close()
    assert "cluster/workers" not in read_scalars(tmp_path / "cluster")


def test_with_one_replica_the_exchange_returns_the_row_in_its_line():
    row = (1.0, 2.5, float("nan"))
    rows = all_gather_rows(tf.distribute.get_strategy(), row, rank=1, workers=3)
    assert rows[0] == rows[2] == [0.0, 0.0, 0.0]
    assert rows[1][:2] == [1.0, 2.5] and math.isnan(rows[1][2])
