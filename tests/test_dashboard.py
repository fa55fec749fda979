"""The Custom Scalars layout made from what a run measured, as a real TensorBoard serves it."""

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
from monitored_runs import DIAGNOSIS
from tied_process import tied_popen

from tfthroughput import GPUMonitor
from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.monitor.dashboard import hardware_layout, layout_summary


def _titles(category) -> list[str]:
    return [chart.title for chart in category.chart]


def _regexes(layout) -> list[str]:
    return [
        regex
        for category in layout.category
        for chart in category.chart
        for regex in chart.multiline.tag
    ]


def test_the_wait_for_input_is_charted_beside_the_first_row_where_measured():
    keys = [SampleKey("gpu0", "utilization_percent")]
    layout = hardware_layout(keys, windows=True, validation=True, wait=True)
    glance = layout.category[0]
    assert _titles(glance)[-1] == "waiting for input [%]"
    assert glance.chart[-1].multiline.tag[0] == r"^window/input/wait_percent$"
    validation = [c for c in layout.category if c.title.startswith("tfthroughput: validation")]
    assert validation[0].chart[-1].multiline.tag[0] == r"^validation/input/wait_percent$"
    evaluate = hardware_layout(keys, phase="evaluate", wait=True).category[0]
    assert evaluate.chart[-1].multiline.tag[0] == r"^evaluate/input/wait_percent$"
    assert "waiting for input [%]" not in _titles(hardware_layout(keys).category[0])


def test_a_cpu_only_run_gets_no_gpu_chart():
    keys = [SampleKey("host", "cpu_percent"), SampleKey("host", "ram_used_percent")]
    layout = hardware_layout(keys)
    assert [category.title for category in layout.category] == [
        "tfthroughput: at a glance (per epoch)",
        "tfthroughput: training throughput per epoch",
        "tfthroughput: host (mean and p95, per epoch)",
    ]
    assert _titles(layout.category[0]) == ["steps per second", "host CPU [%]"]
    assert _titles(layout.category[2]) == ["cpu_percent [%]", "ram_used_percent [%]"]
    assert not [regex for regex in _regexes(layout) if "gpu" in regex]


def test_gpu_utilization_sm_activity_and_examples_lead_and_only_measured_metrics_follow():
    keys = [
        SampleKey("gpu0", "power_watts"),
        SampleKey("gpu0", "utilization_percent"),
        SampleKey("gpu1", "utilization_percent"),
        SampleKey("gpu1", "sm_activity_percent"),  # GPM on one GPU is enough for the chart
        SampleKey("host", "cpu_percent"),
    ]
    layout = hardware_layout(keys, examples=True, windows=True)
    assert [category.title for category in layout.category] == [
        "tfthroughput: at a glance (per window, x: training step)",
        "tfthroughput: GPUs (mean and p95, per window, x: training step)",
        "tfthroughput: GPU-Util against SM activity (per window, x: training step)",
        "tfthroughput: host (mean and p95, per window, x: training step)",
        "tfthroughput: training throughput per epoch",
        "tfthroughput: GPUs (mean and p95, per epoch)",
        "tfthroughput: GPU-Util against SM activity (per epoch)",
        "tfthroughput: host (mean and p95, per epoch)",
    ]
    glance = layout.category[0]
    assert _titles(glance) == ["GPU utilization [%]", "SM activity [%]", "examples per second"]
    assert [chart.multiline.tag[0] for chart in glance.chart] == [
        r"^window/gpu\d+/utilization_percent/mean$",
        r"^window/gpu\d+/sm_activity_percent/mean$",
        r"^window/examples_per_second$",
    ]
    assert _titles(layout.category[5]) == [
        "utilization_percent [%]",
        "power_watts [W]",
        "sm_activity_percent [%]",
    ]
    assert layout.category[5].chart[0].multiline.tag[0] == (
        r"^gpu\d+/utilization_percent/(mean|p95)$"
    )


def test_charts_show_only_logged_statistics():
    layout = hardware_layout([SampleKey("gpu0", "utilization_percent")], statistics=("max",))
    assert layout.category[0].chart[0].multiline.tag[0] == r"^gpu\d+/utilization_percent/max$"
    assert layout.category[-1].title == "tfthroughput: GPUs (max, per epoch)"


def test_the_activity_chart_shows_gpu_util_sm_activity_and_their_gap_for_every_gpu():
    keys = [SampleKey("gpu0", "utilization_percent"), SampleKey("gpu3", "sm_activity_percent")]
    for windows, prefix in ((False, ""), (True, "window/")):
        layout = hardware_layout(keys, windows=windows)
        activity = [c for c in layout.category if "against SM activity" in c.title]
        assert len(activity) == (2 if windows else 1)  # per window and per epoch
        (regex,) = activity[-1].chart[0].multiline.tag
        for tag in (
            "gpu0/utilization_percent/mean",
            "gpu3/sm_activity_percent/mean",
            "gpu12/busy_but_idle_percent",
        ):
            assert re.fullmatch(regex, tag), tag
        for tag in ("gpu0/utilization_percent/p95", "gpu0/tensor_activity_percent/mean"):
            assert not re.fullmatch(regex, tag), tag
        assert re.fullmatch(
            activity[0].chart[0].multiline.tag[0], f"{prefix}gpu1/busy_but_idle_percent"
        )
    without_sm = hardware_layout([SampleKey("gpu0", "utilization_percent")])
    assert not [c for c in without_sm.category if "SM activity" in c.title]


def test_energy_is_charted_as_the_total_it_is():
    energy = SampleKey("gpu0", "energy_joules")
    layout = hardware_layout([SampleKey("gpu0", "power_watts")], totals=[energy])
    gpus = [c for c in layout.category if c.title.startswith("tfthroughput: GPUs")][0]
    assert [chart.multiline.tag[0] for chart in gpus.chart] == [
        r"^gpu\d+/power_watts/(mean|p95)$",
        r"^gpu\d+/energy_joules$",
    ]


def test_the_layout_summary_is_the_one_the_custom_scalars_plugin_makes():
    from tensorboard.plugins.custom_scalar import summary as custom_scalar_summary

    layout = hardware_layout([SampleKey("gpu0", "utilization_percent")], windows=True)
    made_with_tensorflow = custom_scalar_summary.pb(layout)
    assert layout_summary(layout).SerializeToString() == made_with_tensorflow.SerializeToString()


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
    process = tied_popen(
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


# From when a test first asks: a cold TensorBoard on a fresh venv compiles its modules first.
def _wait_for(server: str, path: str, ready, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = _get_json(server, path)
            if ready(found):
                return found
        except OSError:
            pass  # server still starting
        if time.monotonic() > deadline:
            raise AssertionError(f"TensorBoard never served what was expected at {path}")
        time.sleep(0.5)


def _fit(log_dir, sources, **monitor_kwargs) -> None:
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((16, 2), "float32")
    monitor = GPUMonitor(log_dir, interval=0.05, sources=sources, **monitor_kwargs)
    board = keras.callbacks.TensorBoard(str(log_dir))
    model.fit(x, x[:, :1], batch_size=4, epochs=2, verbose=0, callbacks=[board, monitor])


def test_tensorboard_serves_gpu_charts_beside_the_loss(tmp_path, tensorboard_server):
    gpu = {"utilization_percent": 42.0, "sm_activity_percent": 30.0}
    _fit(tmp_path, lambda: [FakeSource("gpu0", gpu)], batch_size=4, update_freq=2)

    tags = _wait_for(
        tensorboard_server,
        "/data/plugin/scalars/tags",
        lambda tags: "epoch/seconds" in tags.get("hardware", {}) and "train" in tags,
    )
    assert "epoch_loss" in tags["train"]
    points = _get_json(
        tensorboard_server,
        "/data/plugin/scalars/scalars",
        run="hardware",
        tag="gpu0/utilization_percent/mean",
    )
    assert [(step, value) for _, step, value in points] == [(0, 42.0), (1, 42.0)]
    points = _get_json(
        tensorboard_server,
        "/data/plugin/scalars/scalars",
        run="hardware",
        tag="window/gpu0/sm_activity_percent/mean",
    )
    assert [(step, value) for _, step, value in points] == [
        (2, 30.0),
        (4, 30.0),
        (6, 30.0),
        (8, 30.0),
    ]

    layout = _get_json(tensorboard_server, "/data/plugin/custom_scalars/layout")
    glance = layout["category"][0]
    assert glance["title"] == "tfthroughput: at a glance (per window, x: training step)"
    assert [chart["title"] for chart in glance["chart"]] == [
        "GPU utilization [%]",
        "SM activity [%]",
        "examples per second",
        "waiting for input [%]",
    ]
    _assert_every_chart_has_data(layout, tags["hardware"])


def test_a_cpu_run_shows_no_gpu_chart_and_its_diagnosis_as_text(tmp_path, tensorboard_server):
    _fit(tmp_path, lambda: [FakeSource("host", {"cpu_percent": 75.0})])
    DIAGNOSIS.write_to_tensorboard(str(tmp_path / "hardware"))

    tags = _wait_for(
        tensorboard_server,
        "/data/plugin/scalars/tags",
        lambda tags: "epoch/seconds" in tags.get("hardware", {}),
    )
    layout = _get_json(tensorboard_server, "/data/plugin/custom_scalars/layout")
    titles = [chart["title"] for category in layout["category"] for chart in category["chart"]]
    assert not [title for title in titles if "GPU" in title or "SM" in title]
    assert [c["title"] for c in layout["category"][0]["chart"]] == [
        "examples per second",  # the batch size is read from the fit
        "host CPU [%]",
        "waiting for input [%]",
    ]
    _assert_every_chart_has_data(layout, tags["hardware"])

    text_tags = _wait_for(
        tensorboard_server, "/data/plugin/text/tags", lambda found: "hardware" in found
    )
    assert sorted(text_tags["hardware"]) == ["diagnosis/report", "input/reading"]
    entries = _get_json(
        tensorboard_server, "/data/plugin/text/text", run="hardware", tag="diagnosis/report"
    )
    assert len(entries) == 1
    assert "Verdict: input-bound" in entries[0]["text"]
    assert "<table>" in entries[0]["text"]  # the markdown table, rendered


def _assert_every_chart_has_data(layout: dict, tags: dict) -> None:
    """No empty chart: every chart's pattern matches a tag the run has."""
    for category in layout["category"]:
        for chart in category["chart"]:
            for pattern in chart["multiline"]["tag"]:
                assert any(re.search(pattern, tag) for tag in tags), (chart["title"], pattern)
