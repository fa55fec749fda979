"""PrometheusSink during a real fit: its endpoint on loopback, scraped after each epoch, shows
the latest window with the run's labels and the event files' values, and stops with the fit.

(Under a two-worker MultiWorkerMirroredStrategy cluster each worker's endpoint is labelled with
its task: tests/test_cluster_exchange.py, which runs that cluster once for both checks.)
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.error
import urllib.request

import keras
import numpy as np
import pytest
from events import read_scalars
from fits import BATCH_SIZE, STEPS_PER_EPOCH, EpochDial, fake_gpus, fit, tiny_model
from prometheus_client.parser import text_string_to_metric_families

from tfthroughput import GPUMonitor
from tfthroughput.sinks import PrometheusSink
from tfthroughput.sinks.prometheus_sink import FIGURE_GAUGES


class Scrape(keras.callbacks.Callback):
    """Reads the endpoint at each epoch's end (listed after the monitor, so after its write)."""

    def __init__(self, sink: PrometheusSink) -> None:
        super().__init__()
        self.sink = sink
        self.pages: list[dict[tuple[str, frozenset], float]] = []
        self.url: str | None = None

    def on_epoch_end(self, epoch, logs=None):
        self.url = self.sink.url
        with urllib.request.urlopen(self.url, timeout=10) as response:
            self.pages.append(parse(response.read().decode()))


def parse(page: str) -> dict[tuple[str, frozenset], float]:
    """``{(sample name, labels): value}`` of a scraped page, as Prometheus reads it."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }


def expected_series(tensorboard: dict, step: int, labels: dict) -> dict:
    """The series the window at ``step`` should show, from its TensorBoard tags."""
    series = {}
    for tag, points in tensorboard.items():
        values = [value for at, value in points if at == step]
        parts = tag.split("/")
        if not values or parts[0] != "window":
            continue
        if len(parts) == 2 and parts[1] in FIGURE_GAUGES:
            name, extra = FIGURE_GAUGES[parts[1]], {}
        elif tag == "window/input/wait_percent":
            name, extra = "input_wait_percent", {}
        elif len(parts) == 4 and parts[3] != "samples":  # window/<source>/<metric>/<statistic>
            source, metric, statistic = parts[1:]
            gpu = {"gpu": source.removeprefix("gpu")} if source.startswith("gpu") else {}
            kind = "gpu" if gpu else source
            name, extra = f"{kind}_{metric}", {**gpu, "statistic": statistic}
        else:
            continue
        series[(f"tfthroughput_{name}", frozenset({**labels, **extra}.items()))] = values[0]
    return series


def test_the_endpoint_shows_the_latest_window_with_the_event_files_values(tmp_path):
    dial = EpochDial()
    sink = PrometheusSink(port=0)
    scrape = Scrape(sink)
    monitor = GPUMonitor(
        tmp_path, interval=0.05, update_freq=2, sources=fake_gpus(dial), sinks=[sink]
    )
    fit(tiny_model(), [dial, monitor, scrape], epochs=2)

    labels = {"run": os.path.basename(tmp_path), "task": "local"}
    tensorboard = read_scalars(monitor.run_dir)
    for epoch, page in enumerate(scrape.pages):
        last_window = (epoch + 1) * STEPS_PER_EPOCH
        expected = expected_series(tensorboard, last_window, labels)
        # TensorBoard keeps float32: compare at its precision.
        shown = {key: float(np.float32(page[key])) for key in expected if key in page}
        assert shown == expected
        assert page[
            (
                "tfthroughput_gpu_utilization_percent",
                frozenset({**labels, "gpu": "0", "statistic": "mean"}.items()),
            )
        ] == 10.0 * (epoch + 1)
        assert (
            page[
                ("tfthroughput_host_cpu_percent", frozenset({**labels, "statistic": "p95"}.items()))
            ]
            == 75.0
        )
        counted = frozenset(labels.items())
        assert page[("tfthroughput_steps_total", counted)] == last_window
        assert page[("tfthroughput_examples_total", counted)] == last_window * BATCH_SIZE
        assert ("tfthroughput_input_wait_percent", frozenset(labels.items())) in expected
    assert len(scrape.pages) == 2 and len(expected) >= 10
    # It stops with the fit.
    assert sink.url is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(scrape.url, timeout=2)


def test_with_epochs_only_each_epoch_is_the_window(tmp_path):
    dial = EpochDial()
    sink = PrometheusSink(port=0, run="nightly")
    scrape = Scrape(sink)
    monitor = GPUMonitor(tmp_path, interval=0.05, sources=fake_gpus(dial), sinks=[sink])
    fit(tiny_model(), [dial, monitor, scrape], epochs=2)
    epochs = read_scalars(monitor.run_dir)["epoch/examples_per_second"]
    labels = frozenset({"run": "nightly", "task": "local"}.items())
    shown = [
        float(np.float32(page[("tfthroughput_examples_per_second", labels)]))
        for page in scrape.pages
    ]
    assert shown == [value for _, value in epochs]
    assert [page[("tfthroughput_steps_total", labels)] for page in scrape.pages] == [4, 8]


def test_a_port_in_use_fails_before_the_first_step(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monitor = GPUMonitor(
            tmp_path, sources=fake_gpus(EpochDial()), sinks=[PrometheusSink(port=port)]
        )
        with pytest.raises(ValueError, match=rf"cannot listen on 127.0.0.1:{port}"):
            fit(tiny_model(), [monitor], epochs=1)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"port": -1}, "Received: port=-1"),
        ({"port": 65536}, "Received: port=65536"),
        ({"port": True}, "Received: port=True"),
        ({"port": 0, "address": "localhost"}, "Received: address='localhost'"),
        ({"port": 0, "run": ""}, "Received: run=''"),
    ],
)
def test_bad_arguments_fail_when_the_sink_is_made(arguments, message):
    with pytest.raises((TypeError, ValueError), match=message):
        PrometheusSink(**arguments)


def test_without_prometheus_client_the_sink_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r'pip install "tfthroughput\[prometheus\]"'):
        PrometheusSink(port=0)
