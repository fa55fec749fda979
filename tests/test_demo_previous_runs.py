"""The demo's runs in its log folder: a second demo replaces every run the first one wrote."""

from __future__ import annotations

import shutil

import pytest

from tfthroughput.demo.previous_runs import DEMO_MARKER, RUN_NAMES, TUNE_RUN, replace_previous_runs
from tfthroughput.report.html import REPORT_FILE_NAME


def _first_demo(log_dir):
    """What a whole first demo leaves: its runs with an event file each, data, report, marker."""
    assert replace_previous_runs(str(log_dir), echo=lambda line: None) == []  # marks it first
    for run in ("naive/hardware", "naive/train", "build_pipeline/hardware", TUNE_RUN):
        (log_dir / run).mkdir(parents=True)
        (log_dir / run / "events.out.tfevents.1.host.1.0.v2").write_bytes(b"first demo")
    (log_dir / "data" / "disc").mkdir(parents=True)
    (log_dir / "data" / "disc" / "00000.jpg").write_bytes(b"jpeg")
    (log_dir / REPORT_FILE_NAME).write_text("<html></html>")


def test_a_second_demo_replaces_all_of_the_first_ones_runs_tune_included(tmp_path):
    _first_demo(tmp_path)
    said = []
    removed = replace_previous_runs(str(tmp_path), echo=said.append)
    assert removed == ["naive", "build_pipeline", "tune"]
    assert said == [
        f"Replacing the previous demo's runs in {tmp_path}: naive, build_pipeline, tune"
    ]
    # Only the images (reused when the count matches) and the marker stay.
    assert sorted(path.name for path in tmp_path.iterdir()) == [DEMO_MARKER, "data"]
    assert (tmp_path / "data" / "disc" / "00000.jpg").read_bytes() == b"jpeg"


def test_a_tune_run_left_by_a_demo_run_with_tune_goes_even_alone(tmp_path):
    _first_demo(tmp_path)
    for run in ("naive", "build_pipeline"):  # say a user removed these by hand
        shutil.rmtree(tmp_path / run)
    assert replace_previous_runs(str(tmp_path), echo=lambda line: None) == ["tune"]
    assert not (tmp_path / TUNE_RUN).exists()


@pytest.mark.parametrize("run", RUN_NAMES)
def test_a_run_no_demo_wrote_is_left_alone(tmp_path, run):
    (tmp_path / run).mkdir()
    with pytest.raises(ValueError, match=f"already holds {run}, which no demo wrote there"):
        replace_previous_runs(str(tmp_path), echo=lambda line: None)
    assert (tmp_path / run).is_dir()
    assert not (tmp_path / DEMO_MARKER).exists()
