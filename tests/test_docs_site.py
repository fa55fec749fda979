"""The front door: the README stays short and points at pages that exist, and the docs site
builds with ``mkdocs build --strict`` (every page in the nav, every link and anchor resolved,
the API reference rendered from the docstrings)."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

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
    assert second.endswith("python -m pytest -n 2")
    ci = (ROOT / ".ci" / "run").read_text()
    assert second in ci


def test_the_test_extra_installs_the_docs_toolchain():
    extras = _extras()
    assert extras["docs"] == {"mkdocs", "mkdocs-material", "mkdocstrings"}
    assert extras["docs"] <= extras["test"]


def test_the_site_builds_strictly_with_the_api_reference(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
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
