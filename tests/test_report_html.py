"""The HTML report: one offline file whose table holds the event files' medians."""

from __future__ import annotations

import base64
import html
import re
import subprocess
import sys
import textwrap
from html.parser import HTMLParser

import pytest
from fakes import FakeSource
from fits import fit, tiny_model
from monitored_runs import DIAGNOSIS, medians_from_event_files, write_monitored_runs

from tfthroughput import GPUMonitor
from tfthroughput._optional import install_command
from tfthroughput.report.html import axis_range, render_html, write_report
from tfthroughput.report.run_comparison import compare_runs


class _Page(HTMLParser):
    """The page's table cells (tag and data-value per row), images and links."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[float | None]] = {}
        self.sources: list[str] = []
        self._row: list | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("src", "href"):
            if name in attrs:
                self.sources.append(attrs[name])
        if tag == "td" and "data-tag" in attrs:
            self._row = self.rows.setdefault(attrs["data-tag"], [])
        elif tag == "td" and self._row is not None and attrs.get("class") == "number":
            value = attrs.get("data-value")
            self._row.append(None if value is None else float(value))
        elif tag == "tr":
            self._row = None


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    write_monitored_runs(folder)
    return folder


def test_report_is_one_offline_page_whose_table_holds_the_event_files_medians(log_dir, tmp_path):
    path = write_report(log_dir, tmp_path / "report.html")
    assert path == str(tmp_path / "report.html")
    page_text = open(path, encoding="utf-8").read()
    page = _Page()
    page.feed(page_text)

    naive = medians_from_event_files(log_dir / "naive" / "hardware")
    fast = medians_from_event_files(log_dir / "build_pipeline" / "hardware")
    assert len(page.rows) == 9
    for tag, cells in page.rows.items():
        if tag.startswith("epoch/"):  # throughput and time: with their ratio
            assert cells == [naive[tag], fast[tag], fast[tag] / naive[tag]], tag
        else:  # percentages and memory: side by side, no ratio
            assert cells == [naive[tag], fast[tag]], tag
    assert page.rows["gpu0/utilization_percent/mean"] == [35.0, 85.0]
    # The input wait the monitor measured, as its event files hold it.
    assert page.rows["input/wait_percent"] == [
        naive["input/wait_percent"],
        fast["input/wait_percent"],
    ]
    assert "input wait [%]</h3>" in page_text
    assert "<th>build_pipeline / naive</th>" in page_text

    # It opens with the verdict and the speed-up, stated as the demo's terminal states it.
    verdict = page_text.index('<h2 id="verdict">Verdict</h2>')
    assert verdict < page_text.index("<h2>Medians over epochs</h2>")
    assert (
        "<b>naive</b>: input-bound (the training step waits on the input pipeline)"
        in (page_text[verdict : page_text.index("<h2>Medians over epochs</h2>")])
    )
    ratio = fast["epoch/examples_per_second"] / naive["epoch/examples_per_second"]
    assert f"build_pipeline vs naive: {ratio:.2f}x [" in page_text
    assert "examples/s (median of epochs 2-3; range of 2 epochs each" in page_text

    # Seven charts (steps/s and the epoch's wall time are tabled only), each a PNG inside the
    # page; nothing to fetch.
    assert len(page.sources) == 7
    for source in page.sources:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    assert not re.search(r"https?://", page_text)

    # The diagnosis as HTML (its table a table), under the run it concerns; HTML inside its
    # text is shown as text.
    diagnosis = page_text[page_text.index("<h3>naive</h3>\n<div") :]
    assert page_text.index("<h3>naive</h3>") > page_text.index("<h2>Diagnosis</h2>")
    assert "<th>measurement</th>" in diagnosis and "<td>(a) input pipeline alone</td>" in diagnosis
    assert "**" not in diagnosis and "|---|" not in diagnosis
    assert f"<code>{DIAGNOSIS.recommendations[0].action}</code>" in diagnosis
    assert "input &lt;b&gt;alone&lt;/b&gt; is 10x slower" in diagnosis
    assert "input <b>alone</b>" not in page_text


def test_default_output_is_report_html_in_the_log_dir(log_dir):
    path = write_report(log_dir)
    assert path == str(log_dir / "report.html")
    assert open(path, encoding="utf-8").read().startswith("<!DOCTYPE html>")


def test_a_cpu_only_run_says_why_gpu_charts_are_missing(tmp_path):
    write_monitored_runs(tmp_path, gpu=False)
    page_text = render_html(compare_runs(tmp_path))
    assert page_text.count("<img") == 4  # host CPU, input wait, examples/s, training time
    assert (
        'GPU-Util [%]</h3><p class="absent">Not recorded in any run: no GPU was sampled'
        in page_text
    )
    assert "none with NVML&#x27;s GPM counters (Hopper and newer)" in page_text


def test_missing_matplotlib_is_an_import_error_naming_the_extra(log_dir):
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["matplotlib"] = None  # as if matplotlib were not installed
        from tfthroughput.report.html import write_report
        try:
            write_report({str(log_dir)!r})
        except ImportError as error:
            print(error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "`tfthroughput report` needs matplotlib, which is not installed: "
        f"{install_command('report')}\n"
    )


def test_percentages_are_drawn_on_a_0_to_100_axis():
    # Host CPU saturated at 99.4-100 % is a flat line at the top, not a zoomed-in crash.
    assert axis_range("%", [99.4, 100.0, 99.8]) == (0.0, 100.0)
    assert axis_range("%", [5.0]) == (0.0, 100.0)
    assert axis_range("%", [210.0]) == (0.0, pytest.approx(220.5))  # a process's CPU: > 100 %
    assert axis_range("examples/s", [400.0, 800.0]) is None


def test_the_runs_epochs_are_counted_without_the_window_tags(tmp_path):
    # 3 epochs of 4 steps with a window per step: 12 points per window tag, 3 per epoch tag.
    monitor = GPUMonitor(
        tmp_path / "windowed",
        interval=0.05,
        update_freq=1,
        sources=lambda: [FakeSource("host", {"cpu_percent": 50.0})],
    )
    fit(tiny_model(), [monitor], epochs=3)
    (run,) = compare_runs(tmp_path).runs
    assert len(run.scalars["window/host/cpu_percent/mean"]) == 12
    assert run.epochs == 3
    assert "<b>windowed</b>: 3 epoch(s)" in render_html(compare_runs(tmp_path))


def test_a_tune_result_under_the_log_folder_appears_in_its_own_section(log_dir):
    from tfthroughput.tuning import TuneResult, TuneSetup, TuneTrial

    given = TuneSetup(1, False, "float32", batch_size=16)
    faster = given.with_(steps_per_execution=8)
    trials = (
        TuneTrial(given, "as given", "baseline", 100.0, 1.0),
        TuneTrial(faster, "steps_per_execution=8", "faster", 400.0, 4.0, 3.5, 4.5, 0.1),
    )
    TuneResult(given, faster, trials, 10.0, 60.0).write_to_tensorboard(str(log_dir / "tune"))

    comparison = compare_runs(log_dir)
    assert [folder for folder, _ in comparison.tunings] == ["tune"]
    assert comparison.tunings[0][1].startswith("setting ")  # the table, not its Markdown block
    page = render_html(comparison)
    assert "<h2>Tuning</h2>" in page
    assert "chosen: steps_per_execution=8: 4.00x [3.50-4.50] over the baseline" in html.unescape(
        page
    )
    assert [run.name for run in comparison.runs] == ["naive", "build_pipeline"]
