"""DiagnosisReport: numbers, terminal text, markdown, and TensorBoard events read back."""

from __future__ import annotations

import glob
import os

import pytest
import tensorflow as tf

from tfthroughput.diagnosis.diagnosis_report import TENSORBOARD_TAGS, DiagnosisReport
from tfthroughput.diagnosis.recommendations import Recommendation
from tfthroughput.diagnosis.verdict import INPUT_BOUND, DiagnosisThresholds


def _report(gpu=None, sm=None) -> DiagnosisReport:
    return DiagnosisReport(
        batch_size=32,
        steps=20,
        repeats=2,
        input_batches_per_second=25.0,
        compute_batches_per_second=100.0,
        fit_batches_per_second=20.0,
        input_bound_fraction=0.8,
        verdict=INPUT_BOUND,
        recommendations=(
            Recommendation("build_pipeline: parallel map", "the pipeline is 4.0x too slow."),
        ),
        gpu_utilization_percent=gpu,
        sm_activity_percent=sm,
    )


def test_derived_numbers():
    report = _report()
    assert report.input_examples_per_second == 800.0
    assert report.compute_examples_per_second == 3200.0
    assert report.fit_examples_per_second == 640.0
    assert report.compute_step_seconds == 0.01
    assert report.fit_step_seconds == 0.05
    assert report.thresholds == DiagnosisThresholds()


def test_report_is_frozen():
    with pytest.raises(AttributeError):
        _report().verdict = "balanced"


def test_terminal_text():
    assert str(_report()) == "\n".join(
        [
            "tfthroughput diagnosis (batch size 32, median of 2 x 20 steps)",
            "measurement               batches/s  examples/s  ms/batch",
            "------------------------  ---------  ----------  --------",
            "(a) input pipeline alone       25.0         800     40.00",
            "(b) training step alone       100.0       3,200     10.00",
            "(c) fit, both together         20.0         640     50.00",
            "",
            "Verdict: input-bound (the training step waits on the input pipeline)",
            "Input-bound fraction: 80% of each fit step waits on input",
            "GPU utilization: not measured",
            "",
            "Recommendations:",
            "  1. build_pipeline: parallel map: the pipeline is 4.0x too slow.",
        ]
    )


def test_markdown():
    markdown = _report(gpu=37.6).to_markdown()
    assert markdown.splitlines()[2:7] == [
        "| measurement | batches/s | examples/s | ms/batch |",
        "|---|---:|---:|---:|",
        "| (a) input pipeline alone | 25.0 | 800 | 40.00 |",
        "| (b) training step alone | 100.0 | 3,200 | 10.00 |",
        "| (c) fit, both together | 20.0 | 640 | 50.00 |",
    ]
    assert "- GPU utilization: 38% during (c)" in markdown
    assert markdown.endswith("1. `build_pipeline: parallel map`: the pipeline is 4.0x too slow.")


def test_sm_activity_is_shown_beside_gpu_util_where_measured():
    assert "GPU utilization: 24% during (c), SM activity 0.5%" in str(_report(gpu=23.6, sm=0.5))
    assert "- GPU utilization: 24% during (c), SM activity 0.5%" in _report(23.6, 0.5).to_markdown()
    assert "GPU utilization: 24% during (c)\n" in str(_report(gpu=23.6))


def _read_events(log_dir):
    (path,) = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
    found = {}
    for event in tf.compat.v1.train.summary_iterator(path):
        for value in event.summary.value:
            found[value.tag] = (event.step, tf.make_ndarray(value.tensor))
    return found


def test_tensorboard_text_and_scalars_read_back(tmp_path):
    report = _report(gpu=37.5, sm=0.5)
    report.write_to_tensorboard(str(tmp_path), step=3)

    events = _read_events(str(tmp_path))
    assert set(events) == set(TENSORBOARD_TAGS)
    step, text = events["diagnosis/report"]
    assert step == 3
    assert text.item().decode() == report.to_markdown()
    assert events["diagnosis/fit_batches_per_second"] == (3, pytest.approx(20.0))
    assert events["diagnosis/input_bound_fraction"][1] == pytest.approx(0.8)
    assert events["diagnosis/gpu_utilization_percent"][1] == pytest.approx(37.5)
    assert events["diagnosis/sm_activity_percent"][1] == pytest.approx(0.5)


def test_tensorboard_skips_unmeasured_gpu(tmp_path):
    _report().write_to_tensorboard(tmp_path)  # a PathLike works too
    events = _read_events(str(tmp_path))
    assert "diagnosis/gpu_utilization_percent" not in events
    assert "diagnosis/sm_activity_percent" not in events
    assert events["diagnosis/input_batches_per_second"] == (0, pytest.approx(25.0))


def test_tensorboard_guards(tmp_path):
    with pytest.raises(TypeError, match="`log_dir` must be a folder path. Received: log_dir=5"):
        _report().write_to_tensorboard(5)
    with pytest.raises(TypeError, match="`step` must be an int. Received: step=1.5"):
        _report().write_to_tensorboard(str(tmp_path), step=1.5)


def test_thresholds_refuse_a_wrong_type_with_type_error():
    with pytest.raises(TypeError, match="Received: launch_overhead_step_seconds='2 ms'"):
        DiagnosisThresholds(launch_overhead_step_seconds="2 ms")
    with pytest.raises(TypeError, match="Received: launch_overhead_step_seconds=True"):
        DiagnosisThresholds(launch_overhead_step_seconds=True)
    with pytest.raises(ValueError, match="Received: launch_overhead_step_seconds=-0.001"):
        DiagnosisThresholds(launch_overhead_step_seconds=-0.001)
