"""The monitor's runs and the ready layout, as a real TensorBoard server serves them."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import keras
import numpy as np
import pytest
from fakes import FakeSource

from tfthroughput import GPUMonitor
from tfthroughput.hardware.metrics import GPU_METRICS
from tfthroughput.monitor.dashboard import hardware_layout, layout_summary


def test_layout_has_a_chart_per_gpu_metric_matching_every_gpu():
    layout = hardware_layout()
    titles = [category.title for category in layout.category]
    assert titles[0] == "tfthroughput: throughput per epoch"
    gpu_charts = layout.category[1].chart
    assert len(gpu_charts) == len(GPU_METRICS)
    regex = gpu_charts[0].multiline.tag[0]
    assert regex == r"^gpu\d+/utilization_percent/(mean|p95)$"


def test_the_activity_chart_shows_gpu_util_sm_activity_and_their_gap_for_every_gpu():
    (activity,) = [c for c in hardware_layout().category if "SM activity" in c.title]
    (regex,) = activity.chart[0].multiline.tag
    for tag in (
        "gpu0/utilization_percent/mean",
        "gpu3/sm_activity_percent/mean",
        "gpu12/busy_but_idle_percent",
    ):
        assert re.fullmatch(regex, tag), tag
    for tag in ("gpu0/utilization_percent/p95", "gpu0/tensor_activity_percent/mean"):
        assert not re.fullmatch(regex, tag), tag


def test_the_layout_summary_is_the_one_the_custom_scalars_plugin_makes():
    from tensorboard.plugins.custom_scalar import summary as custom_scalar_summary

    made_with_tensorflow = custom_scalar_summary.pb(hardware_layout())
    assert layout_summary().SerializeToString() == made_with_tensorflow.SerializeToString()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get_json(base: str, path: str, **query: str):
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@pytest.fixture
def tensorboard_server(tmp_path):
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(tmp_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast",
            "false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_tensorboard_serves_hardware_charts_beside_the_loss(tmp_path, tensorboard_server):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((16, 2), "float32")
    monitor = GPUMonitor(
        tmp_path,
        interval=0.05,
        sources=lambda: [FakeSource("gpu0", {"utilization_percent": 42.0})],
    )
    model.fit(
        x,
        x[:, :1],
        batch_size=4,
        epochs=2,
        verbose=0,
        callbacks=[keras.callbacks.TensorBoard(str(tmp_path)), monitor],
    )

    tags = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            tags = _get_json(tensorboard_server, "/data/plugin/scalars/tags")
            if "gpu0/utilization_percent/mean" in tags.get("hardware", {}) and "train" in tags:
                break
        except OSError:
            pass  # server still starting
        time.sleep(0.5)
    assert "epoch_loss" in tags["train"]
    assert "gpu0/utilization_percent/mean" in tags["hardware"]

    points = _get_json(
        tensorboard_server,
        "/data/plugin/scalars/scalars",
        run="hardware",
        tag="gpu0/utilization_percent/mean",
    )
    assert [(step, value) for _, step, value in points] == [(0, 42.0), (1, 42.0)]

    layout = _get_json(tensorboard_server, "/data/plugin/custom_scalars/layout")
    assert [category["title"] for category in layout["category"]] == [
        category.title for category in hardware_layout().category
    ]
