"""docs/grafana/tfthroughput.json: a dashboard Grafana imports as it is, on PrometheusSink's series.

Checked here: the dashboard JSON model (the keys Grafana's importer reads, unique panel ids,
grid positions inside the 24-column grid, a target with an expression per panel, the template
variables every query uses); every query parses (tests/promql.py, and Prometheus' own parser
through ``promtool`` where it is installed); every query names only series that a real
PrometheusSink exports during a real fit. Where the ``prometheus`` binary is installed
(Debian's ``prometheus`` package), a real Prometheus server scrapes a real sink every second
during a fit (each epoch's end waits for its scrape), and each panel's query and each
variable's values come back with data.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import keras
import pytest
from fakes import FakeSource
from fits import STEPS_PER_EPOCH, fit, tiny_model
from prometheus_client.parser import text_string_to_metric_families
from promql import metric_names
from tied_process import tied_popen

from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.hardware.source import Increment
from tfthroughput.sinks import PrometheusSink

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "tfthroughput.json"
BUILT_IN = {"__rate_interval", "__interval", "__range"}
# The series the issue asks for: throughput, windows, GPU-Util and SM activity, energy, the gap.
WANTED = {
    "tfthroughput_examples_total",
    "tfthroughput_examples_per_second",
    "tfthroughput_steps_per_second",
    "tfthroughput_window_seconds",
    "tfthroughput_gpu_utilization_percent",
    "tfthroughput_gpu_sm_activity_percent",
    "tfthroughput_joules_per_example",
    "tfthroughput_gpu_busy_but_idle_percent",
    "tfthroughput_input_wait_percent",
}
# GPU-Util three times SM activity: the busy-but-idle gap is 40 points, and the monitor warns.
UTILIZATION, SM_ACTIVITY = 60.0, 20.0


def dashboard() -> dict:
    with open(DASHBOARD) as file:
        return json.load(file)


def graph_panels(model: dict) -> list[dict]:
    return [panel for panel in model["panels"] if panel["type"] != "row"]


def queries(model: dict) -> list[str]:
    return [target["expr"] for panel in graph_panels(model) for target in panel["targets"]]


def variable_selectors(model: dict) -> list[str]:
    """The series selectors inside the query variables' ``label_values(selector, label)``."""
    selectors = []
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["definition"])
            assert match, variable["definition"]
            assert variable["query"]["query"] == variable["definition"]
            selectors.append(match.group(1))
    return selectors


def substitute(query: str, run: str = "demo", rate_interval: str = "1m") -> str:
    """The query as Grafana sends it: the variables replaced by a value each."""
    values = {"run": run, "task": ".*", "statistic": "mean", "__rate_interval": rate_interval}
    return re.sub(r"\$\{?(\w+)\}?", lambda match: values[match.group(1)], query)


def test_the_dashboard_is_a_grafana_json_model():
    model = dashboard()
    for key in ("title", "uid", "panels", "templating", "time", "schemaVersion", "editable"):
        assert key in model, key
    assert model["id"] is None  # an imported dashboard gets its id from Grafana
    assert 36 <= model["schemaVersion"] <= 41
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", model["uid"])
    ids = [panel["id"] for panel in model["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    cells = set()
    for panel in model["panels"]:
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"} and grid["x"] + grid["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}  # fmt: skip
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
    for panel in graph_panels(model):
        assert panel["type"] in ("timeseries", "stat", "gauge")
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(target["expr"].strip() for target in panel["targets"])
    variables = {variable["name"]: variable for variable in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["run"]["type"] == "query" and not variables["run"]["multi"]
    used = {
        name
        for text in [*queries(model), *variable_selectors(model)]
        for name in re.findall(r"\$\{?(\w+)\}?", text)
    }
    assert used - BUILT_IN <= set(variables) and {"run", "task"} <= used


def test_every_query_parses():
    model = dashboard()
    for query in [*queries(model), *variable_selectors(model)]:
        assert metric_names(substitute(query)), query


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_prometheus_own_parser_reads_every_query(tmp_path):
    model = dashboard()
    rules = [
        {"record": f"tfthroughput:query_{index}", "expr": substitute(query)}
        for index, query in enumerate([*queries(model), *variable_selectors(model)])
    ]
    path = tmp_path / "rules.json"  # YAML is a superset of JSON
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(rules)} rules found" in checked.stdout


def fake_hardware():
    def gpu(name):
        values = {
            "utilization_percent": UTILIZATION,
            "sm_activity_percent": SM_ACTIVITY,
            "power_watts": 200.0,
            "energy_joules": Increment(10.0, 0.05, counter=True),
        }
        return FakeSource(name, values)

    return lambda: [gpu("gpu0"), gpu("gpu1"), FakeSource("host", {"cpu_percent": 75.0})]


class Scrape(keras.callbacks.Callback):
    """The names of the samples on the sink's page at each epoch's end."""

    def __init__(self, sink: PrometheusSink) -> None:
        super().__init__()
        self.sink = sink
        self.names: set[str] = set()

    def on_epoch_end(self, epoch, logs=None):
        with urllib.request.urlopen(self.sink.url, timeout=10) as response:
            page = response.read().decode()
        for family in text_string_to_metric_families(page):
            self.names |= {sample.name for sample in family.samples}


def test_every_query_names_only_series_the_sink_exports(tmp_path):
    sink = PrometheusSink(port=0)
    scrape = Scrape(sink)
    monitor = GPUMonitor(tmp_path, interval=0.05, update_freq=2, sources=fake_hardware(),
                         sinks=[sink])  # fmt: skip
    with pytest.warns(MonitoringWarning, match="GPU-Util overstates the work 3x"):
        fit(tiny_model(), [monitor, scrape], epochs=2)
    model = dashboard()
    named = set().union(*(metric_names(substitute(q)) for q in queries(model)))
    for selector in variable_selectors(model):
        named |= metric_names(substitute(selector))
    assert named <= scrape.names, named - scrape.names
    assert WANTED <= named


class WaitForScrape(keras.callbacks.Callback):
    """Holds each epoch's end (after the monitor's write) until Prometheus has scraped it.

    So every epoch reaches the server whatever the load, and the first scrape, which
    Prometheus' target discovery may delay by a few seconds, is waited for too.
    """

    def __init__(self, api: str, run: str) -> None:
        super().__init__()
        self.query = f"{api}/api/v1/query?" + urllib.parse.urlencode(
            {"query": f'tfthroughput_steps_total{{run="{run}"}}'}
        )

    def on_epoch_end(self, epoch, logs=None):
        steps = (epoch + 1) * STEPS_PER_EPOCH
        deadline = time.monotonic() + 60
        while [float(row["value"][1]) for row in get_json(self.query)["data"]["result"]] != [steps]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus never scraped step {steps}")
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read().decode())


@pytest.fixture
def prometheus(tmp_path):
    """A real Prometheus server scraping ``127.0.0.1:<port>`` every second: ``(api, port)``."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (Debian: apt-get install prometheus)")
    target, listen = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    scrape = {"job_name": "tfthroughput", "scrape_interval": "1s", "scrape_timeout": "1s",
              "static_configs": [{"targets": [f"127.0.0.1:{target}"]}]}  # fmt: skip
    config.write_text(json.dumps({"scrape_configs": [scrape]}))
    log = tmp_path / "prometheus.log"  # a file, not a pipe: a full pipe would stall the server
    errors = log.open("w")
    server = tied_popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{listen}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=errors,
    )  # fmt: skip
    api = f"http://127.0.0.1:{listen}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{api}/-/ready", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    message = f"Prometheus did not start: {log.read_text()!r}"
                    raise RuntimeError(message) from None
                time.sleep(0.2)
        yield api, target
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        errors.close()


@pytest.mark.slow
def test_each_panel_returns_data_from_a_real_prometheus(tmp_path, prometheus):
    api, port = prometheus
    sink = PrometheusSink(port=port, run="grafana")
    monitor = GPUMonitor(tmp_path / "logs", interval=0.05, update_freq=2,
                         sources=fake_hardware(), sinks=[sink])  # fmt: skip
    start = time.time()
    with pytest.warns(MonitoringWarning, match="GPU-Util overstates the work 3x"):
        fit(tiny_model(), [monitor, WaitForScrape(api, "grafana")], epochs=4)
    end = time.time()
    model = dashboard()
    for panel in graph_panels(model):
        for target in panel["targets"]:
            query = substitute(target["expr"], run="grafana", rate_interval="10s")
            arguments = {"query": query, "start": start, "end": end, "step": 1}
            answer = get_json(f"{api}/api/v1/query_range?{urllib.parse.urlencode(arguments)}")
            series = answer["data"]["result"]
            assert answer["status"] == "success" and series, (panel["title"], query)
            assert all(row["values"] for row in series)
            values = {float(value) for row in series for _, value in row["values"]}
            if "gpu_utilization" in query:
                assert values == {UTILIZATION}
                assert {row["metric"]["gpu"] for row in series} == {"0", "1"}
            if "busy_but_idle" in query:
                assert values == {UTILIZATION - SM_ACTIVITY}
    for variable in ("run", "task"):
        match = {"match[]": "tfthroughput_steps_total", "start": start, "end": end}
        answer = get_json(f"{api}/api/v1/label/{variable}/values?{urllib.parse.urlencode(match)}")
        assert answer["data"] == [{"run": "grafana", "task": "local"}[variable]]
