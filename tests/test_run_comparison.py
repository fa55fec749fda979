"""compare_runs: real GPUMonitor event files from real fits, read back and compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf
from monitored_runs import DIAGNOSIS, medians_from_event_files, write_monitored_runs

from tfthroughput.report.run_comparison import QUANTITIES, compare_runs

EXPECTED_TAGS = [
    "gpu0/utilization_percent/mean",
    "gpu0/sm_activity_percent/mean",
    "gpu0/memory_used_gib/mean",
    "host/cpu_percent/mean",
    "input/wait_percent",
    "epoch/examples_per_second",
    "epoch/steps_per_second",
    "epoch/seconds",
    "epoch/wall_seconds",
]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    write_monitored_runs(folder)
    return folder


def test_runs_are_the_monitor_runs_in_the_order_they_were_written(log_dir):
    comparison = compare_runs(log_dir)
    assert [run.name for run in comparison.runs] == ["naive", "build_pipeline"]
    assert [run.path for run in comparison.runs] == [
        os.path.join(log_dir, "naive", "hardware"),
        os.path.join(log_dir, "build_pipeline", "hardware"),
    ]
    naive = comparison.runs[0]
    assert [value for _, value in naive.scalars["gpu0/utilization_percent/mean"]] == [20, 40, 30]
    assert [epoch for epoch, _ in naive.scalars["epoch/seconds"]] == [0, 1, 2]


def test_table_medians_and_ratios_match_the_event_files(log_dir):
    comparison = compare_runs(log_dir)
    assert [row.tag for row in comparison.rows] == EXPECTED_TAGS
    from_files = [medians_from_event_files(run.path) for run in comparison.runs]
    for row in comparison.rows:
        expected = tuple(medians[row.tag] for medians in from_files)
        assert row.medians == expected, row.tag
        if row.quantity.compared_by_ratio:
            assert row.ratios == (1.0, expected[1] / expected[0]), row.tag
        else:  # twice the host CPU or memory is not twice as good: no ratio
            assert row.ratios == (None, None), row.tag
    by_tag = {row.tag: row for row in comparison.rows}
    # The fake readings' medians over epochs 2-3 (the first left out), exactly.
    assert by_tag["gpu0/utilization_percent/mean"].medians == (35.0, 85.0)
    assert by_tag["gpu0/sm_activity_percent/mean"].medians == (20.0, 65.0)
    assert by_tag["gpu0/memory_used_gib/mean"].medians == (3.375, 4.375)
    assert by_tag["host/cpu_percent/mean"].ratios == (None, None)
    assert [row.tag for row in comparison.rows if row.quantity.compared_by_ratio] == [
        "epoch/examples_per_second",
        "epoch/steps_per_second",
        "epoch/seconds",
        "epoch/wall_seconds",
    ]
    assert by_tag["gpu0/utilization_percent/mean"].source == "gpu0"
    assert by_tag["epoch/seconds"].source == ""


def test_the_speedup_is_stated_as_the_demo_states_it(log_dir):
    comparison = compare_runs(log_dir)
    assert [run.epochs for run in comparison.runs] == [3, 3]
    assert comparison.label == "median of epochs 2-3"
    (speedup,) = comparison.speedups()
    rows = {row.tag: row for row in comparison.rows}
    assert speedup.ratio == rows["epoch/examples_per_second"].ratios[1]
    # Two runs not timed side by side: the range their steady epochs allow, and whether
    # those overlap (then the ratio is within the noise).
    naive, fast = (
        [value for _, value in run.scalars["epoch/examples_per_second"]][1:]
        for run in comparison.runs
    )
    assert (speedup.low, speedup.high) == (min(fast) / max(naive), max(fast) / min(naive))
    # Either run may be the faster one on a loaded machine: the ranges overlap both ways.
    overlap = min(fast) <= max(naive) and min(naive) <= max(fast)
    assert speedup.overlap == overlap and speedup.epochs == 2
    noise = "; within the noise" if speedup.overlap else ""
    assert str(speedup) == (
        f"build_pipeline vs naive: {speedup.ratio:.2f}x [{speedup.low:.2f}-{speedup.high:.2f}] "
        f"examples/s (median of epochs 2-3; range of 2 epochs each{noise})"
    )


def test_each_run_gets_the_diagnosis_written_in_its_folder(log_dir):
    naive, fast = compare_runs(log_dir).runs
    assert naive.diagnosis == DIAGNOSIS.to_markdown()
    assert fast.diagnosis is None


def test_a_log_dir_that_is_one_experiment_is_named_after_its_folder(log_dir):
    (run,) = compare_runs(log_dir / "naive").runs
    assert run.name == "naive"
    assert run.diagnosis == DIAGNOSIS.to_markdown()
    (run,) = compare_runs(log_dir / "naive" / "hardware").runs
    assert run.name == "naive"


def test_every_quantity_names_its_unit_and_why_it_may_be_absent():
    assert [q.title for q in QUANTITIES] == [
        "GPU-Util",
        "SM activity",
        "GPU memory used",
        "host CPU",
        "input wait",
        "examples/s",
        "steps/s",
        "training time",
        "epoch wall time",
    ]
    assert [q.unit for q in QUANTITIES] == [
        "%",
        "%",
        "GiB",
        "%",
        "%",
        "examples/s",
        "steps/s",
        "s",
        "s",
    ]
    assert all(q.absent for q in QUANTITIES)


def test_reading_needs_no_tensorflow(log_dir):
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["tensorflow"] = None  # TensorBoard falls back to its own stub
        from tfthroughput.report.run_comparison import compare_runs
        comparison = compare_runs({str(log_dir)!r})
        print(json.dumps({{row.tag: row.medians for row in comparison.rows}}))
        print("tensorflow" in sys.modules and sys.modules["tensorflow"] is not None)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    medians, tensorflow_loaded = result.stdout.splitlines()
    assert tensorflow_loaded == "False"
    in_process = {row.tag: list(row.medians) for row in compare_runs(log_dir).rows}
    assert json.loads(medians) == in_process


def test_missing_folder_file_and_empty_folder_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder: .*missing"):
        compare_runs(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="not a folder"):
        compare_runs(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no TensorBoard event files under"):
        compare_runs(tmp_path / "empty")


def test_runs_without_hardware_tags_are_named_in_the_error(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "train"))
    with writer.as_default():
        tf.summary.scalar("epoch_loss", 0.5, step=0)
    writer.close()
    with pytest.raises(
        ValueError, match=r"no run under .* has GPUMonitor's hardware tags \(runs found: train\)"
    ):
        compare_runs(tmp_path)
