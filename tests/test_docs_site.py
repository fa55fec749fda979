"""The front door: the README stays short and points at pages that exist, and the docs site
builds with ``mkdocs build --strict`` (every page in the nav, every link and anchor resolved,
the API reference rendered from the docstrings)."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import tfthroughput

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_LIMIT_BYTES = 15 * 1024


def _extras() -> dict[str, set[str]]:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    extras = setup["options.extras_require"]
    return {
        name: {re.split(r"[\[<>=]", line)[0] for line in extras[name].split()} for name in extras
    }


def test_the_readme_is_at_most_15_kb():
    assert len(README.read_bytes()) <= README_LIMIT_BYTES


def test_the_readme_links_only_to_files_that_exist():
    targets = re.findall(r"\]\(((?!https?://)[^)#]+)(?:#[^)]*)?\)", README.read_text())
    assert targets, "the README links to its docs pages"
    assert [target for target in targets if not (ROOT / target).exists()] == []


def test_the_first_command_installs_what_the_demo_needs_and_ci_runs_the_second():
    first, second = re.findall(r"^python3 -m venv .*$", README.read_text(), re.M)[:2]
    assert '.[tensorflow,report]"' in first and first.endswith("tfthroughput demo")
    assert second.endswith("python -m pytest -n 3")
    ci = (ROOT / ".ci" / "run").read_text()
    assert second in ci


def test_the_test_extra_installs_the_docs_toolchain():
    extras = _extras()
    assert extras["docs"] == {"mkdocs", "mkdocs-material", "mkdocstrings"}
    assert extras["docs"] <= extras["test"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The docs site, built once for the tests that read it."""
    site = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return site


def test_the_site_builds_strictly_with_the_api_reference(site):
    pages = {
        path.relative_to(ROOT / "docs").with_suffix("").as_posix()
        for path in (ROOT / "docs").rglob("*.md")
    }
    built = {path.parent.relative_to(site).as_posix() for path in site.rglob("index.html")} - {"."}
    assert {page.removesuffix("/index") for page in pages} - {"index"} <= built
    # The reference lists every top-level name, each linked to its entry rendered from its
    # docstring (GPUMonitor's Args name update_freq).
    names = (site / "api" / "index.html").read_text()
    for name in tfthroughput.__all__:
        assert f"<code>{name}</code>" in names, name
    monitor = (site / "api" / "monitor" / "index.html").read_text()
    assert 'id="tfthroughput.monitor.gpu_monitor.GPUMonitor"' in monitor
    assert "update_freq" in monitor


class _Blocks(HTMLParser):
    """The rows of the first table (each a list of cell texts) and the paragraphs after it."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.after: list[str] = []
        self._in = {"table": False, "td": False, "p": False}
        self._seen_table = False

    def handle_starttag(self, tag, attrs):
        if tag == "table" and not self._seen_table:
            self._in["table"] = True
        elif tag == "tr" and self._in["table"]:
            self.rows.append([])
        elif tag == "td" and self._in["table"]:
            self._in["td"] = True
            self.rows[-1].append("")
        elif tag == "p" and self._seen_table:
            self._in["p"] = True
            self.after.append("")

    def handle_endtag(self, tag):
        if tag == "table" and self._in["table"]:
            self._in["table"], self._seen_table = False, True
        elif tag in ("td", "p"):
            self._in[tag] = False

    def handle_data(self, data):
        if self._in["td"]:
            self.rows[-1][-1] += data
        elif self._in["p"]:
            self.after[-1] += data


def _api_page_blocks(site: Path) -> _Blocks:
    blocks = _Blocks()
    blocks.feed((site / "api" / "index.html").read_text())
    return blocks


SENTENCE_BREAK = re.compile(r"[.!?]\s+[A-Z]")  # a full stop, then a new sentence


def is_one_whole_sentence(text: str) -> bool:
    """A capital first, a full stop last, and no full stop followed by a new sentence."""
    return text[:1].isupper() and text.endswith(".") and not SENTENCE_BREAK.search(text)


def test_the_api_table_lists_the_public_names_each_with_one_whole_sentence(site):
    rows = [row for row in _api_page_blocks(site).rows if row]  # the header has no td

    assert sorted(row[0] for row in rows) == sorted(tfthroughput.__all__)
    for name, summary in rows:
        summary = " ".join(summary.split())
        assert is_one_whole_sentence(summary), (name, summary)
    gpu_monitor = dict(rows)["GPUMonitor"]
    assert gpu_monitor.endswith("writes their statistics to TensorBoard, each phase on its own.")


def test_the_paragraph_after_the_api_table_is_a_paragraph(site):
    blocks = _api_page_blocks(site)

    assert not any("Result and configuration" in cell for row in blocks.rows for cell in row)
    assert blocks.after[0].startswith("Result and configuration types live in each subpackage")
    assert " ".join(blocks.after[0].split()).endswith(
        "e.g. from tfthroughput.data import PipelineLint."
    )


class _Descriptions(HTMLParser):
    """The text of every description mkdocstrings renders in a table (its
    ``doc-md-description`` blocks: members' summaries, arguments, returns, raises)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self._depth = 0  # open divs inside the description being read; 0: none being read

    def handle_starttag(self, tag, attrs):
        if tag != "div":
            return
        if self._depth:
            self._depth += 1
        elif "doc-md-description" in (dict(attrs).get("class") or "").split():
            self._depth = 1
            self.texts.append("")

    def handle_endtag(self, tag):
        if tag == "div" and self._depth:
            self._depth -= 1
            if not self._depth:
                self.texts[-1] = " ".join(self.texts[-1].split())

    def handle_data(self, data):
        if self._depth:
            self.texts[-1] += data


def test_no_description_on_an_api_page_ends_mid_sentence(site):
    """mkdocstrings' member summaries take a docstring's first line, and a Returns section
    read as several items made each wrapped line a row: both cut sentences."""
    cut = []
    for page in sorted((site / "api").glob("*/index.html")):  # the subpackages' pages
        descriptions = _Descriptions()
        descriptions.feed(page.read_text())
        assert descriptions.texts, page
        cut += [(page.parent.name, text) for text in descriptions.texts if text[-1:] not in ".):"]
    assert cut == []


def test_docstring_examples_render_as_code_on_the_api_pages(site):
    """A Google-style ``Example:`` section is code: read as Markdown, ``>>>`` became three
    nested quotes and a ``# comment`` line a heading in the table of contents."""
    for page in sorted((site / "api").glob("*/index.html")):
        html = page.read_text()
        assert "<blockquote>" not in html, page.parent.name
        assert "# doctest:" not in html, page.parent.name
    diagnosis = (site / "api" / "diagnosis" / "index.html").read_text()
    assert '<span class="gp">&gt;&gt;&gt; </span><span class="n">report</span>' in diagnosis


@pytest.mark.parametrize(
    ("summary", "whole"),
    [
        ("Iterate a dataset and time it.", True),
        ("Samples GPU and host metrics during fit, evaluate and predict and writes their", False),
        ("A warning (a metric dropped, a GPU lost, ...).", True),
        ("Time it. Then print it.", False),
        ("lower case start.", False),
    ],
)
def test_the_sentence_check_tells_a_cut_summary(summary, whole):
    assert is_one_whole_sentence(summary) == whole
