from __future__ import annotations

import os

from tfthroughput.cli.run_summary import summary_text, write_report_quietly
from tfthroughput.monitor import MonitoredCall

RULE = "-" * 78


def test_a_script_that_never_called_fit_is_told_so():
    assert summary_text([], None).splitlines() == [
        RULE,
        "tfthroughput: the script called no Keras fit, evaluate or predict: nothing was measured",
        RULE,
    ]
    assert write_report_quietly([]) is None


def test_a_run_that_cannot_be_read_is_one_line_and_the_others_still_show(tmp_path):
    lost = MonitoredCall("fit", "fit-1", str(tmp_path / "gone"))
    own = MonitoredCall("predict", "hardware", str(tmp_path / "mine"), own_monitor=True)
    lines = summary_text([lost, own], None).splitlines()
    assert lines[1] == "tfthroughput: 2 monitored calls"
    assert lines[2].startswith("fit-1: not read (")
    mine = os.path.join(tmp_path, "mine", "hardware")
    assert lines[3].startswith(f"{mine} (its own GPUMonitor): not read (")
    folders = f"{tmp_path / 'gone'}, {tmp_path / 'mine'}"
    assert lines[4] == f"runs: {folders} (tensorboard --logdir {tmp_path / 'gone'})"
    assert lines[5] == RULE


def test_a_report_that_cannot_be_written_says_why_instead_of_failing(tmp_path):
    (tmp_path / "empty").mkdir()
    written = write_report_quietly([MonitoredCall("fit", "fit-1", str(tmp_path / "empty"))])
    assert written.startswith("not written (")
    assert os.listdir(tmp_path / "empty") == []


def test_a_run_of_a_models_calls_in_a_loop_counts_each_call(tmp_path):
    from fakes import FakeSource
    from fits import data, tiny_model

    from tfthroughput import GPUMonitor

    gpu = lambda: [FakeSource("gpu0", {"utilization_percent": 40.0})]  # noqa: E731
    monitor = GPUMonitor(tmp_path, interval=3600, run_name="predict-1", sources=gpu)
    model, (x, _) = tiny_model(), data()
    for _ in range(3):
        model.predict(x, verbose=0, callbacks=[monitor])
    run = MonitoredCall("predict", "predict-1", str(tmp_path))
    lines = summary_text([run], None).splitlines()
    assert lines[1] == "tfthroughput: 3 monitored calls in 1 run"
    assert lines[2].startswith("predict-1: 3 calls, ")
