"""The `tfthroughput` command, run as a user runs it: in a subprocess, with no logging set up."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys

import pytest
import tensorflow as tf
from events import event_files, read_scalars
from interruptible import interruptible_popen, signal_state
from monitored_runs import write_monitored_runs

import tfthroughput
from tfthroughput._optional import install_command

# What TensorFlow 2.21's native libraries print while they start, unless kept off the terminal:
# absl's pre-init notice, then log lines such as
# "I0000 00:00:1796003938.030014    9717 cudart_stub.cc:31] Could not find cuda drivers ...".
_NATIVE_LOG_LINE = re.compile(r"^[IWEF]\d{4} \S+\s+\d+ \S+:\d+\] ", re.MULTILINE)
_STARTUP_WORDS = (
    "absl::InitializeLog",
    "cudart_stub",
    "cpu_feature_guard",
    "To enable the following instructions",
    "oneDNN custom operations",  # TF's line; the package's own advice may name oneDNN too
    "cuInit",
    "Unable to register",
)


def run_cli(*args: str, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    # As a user runs it: none of TensorFlow's logging variables set.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP_", "TF_XLA_"))}
    return subprocess.run(
        [sys.executable, "-m", "tfthroughput.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def startup_noise(text: str) -> list[str]:
    """The lines of ``text`` that are TensorFlow start-up log."""
    return [
        line
        for line in text.splitlines()
        if _NATIVE_LOG_LINE.match(line) or any(word in line for word in _STARTUP_WORDS)
    ]


def _text(run_dir, tag: str) -> list[str]:
    texts = []
    for file in event_files(run_dir):
        for record in tf.data.TFRecordDataset(file):
            event = tf.compat.v1.Event.FromString(record.numpy())
            texts += [v.tensor.string_val[0].decode() for v in event.summary.value if v.tag == tag]
    return texts


def test_demo_trains_both_pipelines_diagnoses_and_points_to_tensorboard(tmp_path):
    log_dir = tmp_path / "demo logs"  # a space, as in many home folders
    result = run_cli(
        "demo", "--images", "96", "--epochs", "2", "--batch-size", "16", "--log-dir", str(log_dir)
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # The demo's own words come first, with no TensorFlow start-up log anywhere.
    assert out.startswith("[1/4] Writing 96 synthetic JPEGs"), out[:500]
    assert startup_noise(result.stderr) == [], result.stderr
    assert startup_noise(out) == []
    assert "build_pipeline vs naive:" in out
    # Two runs not timed side by side: the ratio with the range their epochs allow.
    assert "examples/s (epoch 2; range of 1 epoch each" in out
    assert "verdict" in out.lower()
    report = log_dir / "report.html"
    assert f"One page comparing both runs: {shlex.quote(str(report))}\n" in out
    assert out.rstrip().endswith(f"tensorboard --logdir {shlex.quote(str(log_dir))}")
    assert "'" in shlex.quote(str(log_dir))
    assert "<th>naive</th><th>build_pipeline</th>" in report.read_text(encoding="utf-8")
    for run in ("naive", "build_pipeline"):
        hardware = read_scalars(log_dir / run / "hardware")
        train = read_scalars(log_dir / run / "train")
        assert [step for step, _ in hardware["epoch/examples_per_second"]] == [0, 1]
        # Keras writes its epoch charts only when its batch count at the epoch's end is a
        # multiple of update_freq: the demo's windows divide the epoch, so both are there.
        assert [step for step, _ in train["epoch_loss"]] == [0, 1]
        assert [step for step, _ in train["epoch_accuracy"]] == [0, 1]
        # 6 steps per epoch: windows of 2 steps (the divisor nearest a quarter epoch), on the
        # same x-axis as Keras's batch-level loss.
        windows = [step for step, _ in hardware["window/examples_per_second"]]
        assert windows == list(range(2, 13, 2))
        assert [step for step, _ in train["batch_loss"]] == windows
    diagnosis = _text(log_dir / "naive" / "hardware", "diagnosis/report")
    assert len(diagnosis) == 1 and "Verdict: " in diagnosis[0]
    comparison = _text(log_dir / "build_pipeline" / "hardware", "demo/comparison")
    assert len(comparison) == 1 and "build_pipeline vs naive: " in comparison[0]
    # tune on its own workload, after the diagnosis, its table in its run's Text tab.
    assert out.index("Tuning a small launch-bound model") > out.index("Verdict: ")
    assert "as given: steps_per_execution=1, XLA off, float32, batch 16" in out
    tuned = _text(log_dir / "tune", "tune/result")
    assert len(tuned) == 1 and "as given: steps_per_execution=1" in tuned[0]
    # A second run reuses the images it wrote (and skips tune).
    again = run_cli(
        "demo",
        "--images",
        "96",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--log-dir",
        str(log_dir),
        "--no-tune",
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(
        f"Replacing the previous demo's runs in {log_dir}: naive, build_pipeline, tune\n"
    )
    assert "[1/4] Reusing 96 JPEGs" in again.stdout
    assert "Tuning a small" not in again.stdout
    assert not (log_dir / "tune").exists()  # the first demo's tune run went with the others
    # Fresh runs: one epoch each, no line jumping back to an earlier run's steps.
    for run in ("naive", "build_pipeline"):
        hardware = read_scalars(log_dir / run / "hardware")
        assert [step for step, _ in hardware["epoch/examples_per_second"]] == [0]
        assert [step for step, _ in read_scalars(log_dir / run / "train")["epoch_loss"]] == [0]


def test_the_demo_leaves_runs_it_did_not_write_alone(tmp_path):
    (tmp_path / "logs" / "naive").mkdir(parents=True)
    result = run_cli("demo", "--log-dir", str(tmp_path / "logs"), timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith(
        "tfthroughput demo: error: `--log-dir` already holds naive, which no demo wrote there"
    )
    assert (tmp_path / "logs" / "naive").is_dir()


def test_info_reports_versions_devices_nvml_and_precision():
    result = run_cli("info")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("TensorFlow ")
    assert "TensorFlow devices: /physical_device:CPU:0" in result.stdout
    assert "NVML: unavailable: the NVML library (libnvidia-ml.so.1) was not found" in result.stdout
    assert "precision policy: " in result.stdout
    assert startup_noise(result.stderr) == [], result.stderr


@pytest.mark.parametrize("args", [("--verbose", "info"), ("info", "--verbose")])
def test_verbose_is_taken_before_or_after_the_command(args):
    from tfthroughput.cli import _parser

    assert _parser().parse_args(args).verbose is True
    assert _parser().parse_args(["info"]).verbose is False


def test_verbose_shows_tensorflows_startup_log():
    result = run_cli("info", "--verbose")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("TensorFlow ")
    # Whatever this TensorFlow build logs while starting is there again, unfiltered.
    assert _NATIVE_LOG_LINE.search(result.stderr), result.stderr


def test_version_prints_the_package_version():
    result = run_cli("--version", timeout=60)
    assert result.returncode == 0
    assert result.stdout == f"tfthroughput {tfthroughput.__version__}\n"


def test_report_writes_one_html_file_comparing_the_runs(tmp_path):
    write_monitored_runs(tmp_path / "logs")
    result = run_cli("report", str(tmp_path / "logs"), "-o", str(tmp_path / "both.html"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {tmp_path / 'both.html'}\n"
    page = (tmp_path / "both.html").read_text(encoding="utf-8")
    assert "<th>naive</th><th>build_pipeline</th><th>build_pipeline / naive</th>" in page
    assert page.count('src="data:image/png;base64,') == 7


def _keras_only_run(folder) -> None:
    writer = tf.summary.create_file_writer(str(folder / "train"))
    with writer.as_default():
        tf.summary.scalar("epoch_loss", 0.5, step=0)
    writer.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: None, "no such folder: "),
        (lambda path: path.mkdir(), "no TensorBoard event files under "),
        (_keras_only_run, "has GPUMonitor's hardware tags (runs found: train)"),
    ],
    ids=["missing folder", "no runs", "run without hardware tags"],
)
def test_report_on_bad_input_exits_1_with_one_line(tmp_path, make, message):
    make(tmp_path / "logs")
    result = run_cli("report", str(tmp_path / "logs"), timeout=120)
    assert result.returncode == 1
    assert result.stderr.startswith("tfthroughput report: error: ")
    assert message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_report_without_matplotlib_says_which_line_installs_it(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None; from tfthroughput.cli import main; "
        f"sys.exit(main(['report', {str(tmp_path)!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    # Run from this clone: the hint installs the clone's extra, not the package index's.
    assert result.stderr == (
        "tfthroughput report: error: `tfthroughput report` needs matplotlib, which is not "
        f"installed: {install_command('report')}\n"
    )
    assert "-m pip install -e " in result.stderr and "[report]" in result.stderr


def test_demo_without_tensorflow_says_which_line_installs_it(tmp_path):
    tests = os.path.dirname(__file__)
    code = (
        f"import sys; sys.path.insert(0, {tests!r}); import without_tensorflow; "
        "from tfthroughput.cli import main; "
        f"sys.exit(main(['demo', '--log-dir', {str(tmp_path / 'logs')!r}]))"
    )
    env = {key: value for key, value in os.environ.items() if key != "KERAS_BACKEND"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 1
    assert result.stderr.startswith(
        "tfthroughput demo: error: `tfthroughput demo` needs TensorFlow, which is not "
        f"installed: {install_command('tensorflow')}. "
    )
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_report_has_help():
    result = run_cli("report", "--help", timeout=60)
    assert result.returncode == 0
    assert result.stdout.startswith(
        "usage: tfthroughput report [-h] [--verbose] [-o OUTPUT] LOGDIR"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("train",), "invalid choice: 'train'"),
        (("demo", "--epochs", "0"), "argument --epochs: expected a positive integer, got '0'"),
        (("demo", "--images", "many"), "argument --images: expected a positive integer"),
        (("demo", "--colour", "red"), "unrecognized arguments: --colour red"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args, message):
    result = run_cli(*args, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


def _one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_unusable_log_dir_exits_1_with_the_reason(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run_cli("demo", "--images", "9", "--epochs", "1", "--log-dir", str(blocker / "logs"))
    assert _one_error_line(result) == (
        "tfthroughput demo: error: `--log-dir` must be a folder this process can create and "
        f"write to. Received: --log-dir='{blocker}/logs' ([Errno 20] Not a directory: "
        f"'{blocker}/logs')"
    )


def test_an_unusable_log_dir_fails_before_any_work_even_with_a_good_data_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    data_dir = tmp_path / "data"
    result = run_cli(
        "demo", "--images", "9", "--epochs", "1",
        "--log-dir", str(blocker / "x"), "--data-dir", str(data_dir),
    )  # fmt: skip
    assert _one_error_line(result).startswith(
        "tfthroughput demo: error: `--log-dir` must be a folder this process can create"
    )
    assert result.stdout == ""  # nothing written, nothing trained
    assert not data_dir.exists()


def _undecodable_images(data_dir) -> None:
    """Nine files the demo takes for its JPEGs (right names and count) that are not JPEGs."""
    for index, label in enumerate(("disc", "square", "stripes") * 3):
        (data_dir / label).mkdir(parents=True, exist_ok=True)
        (data_dir / label / f"{index:05d}.jpg").write_text("not a JPEG")


def test_a_failure_while_training_is_one_line_and_verbose_gives_the_traceback(tmp_path):
    _undecodable_images(tmp_path / "data")
    args = ("demo", "--images", "9", "--epochs", "1", "--log-dir", str(tmp_path))
    result = run_cli(*args)
    assert _one_error_line(result) == (
        "tfthroughput demo: error: InvalidArgumentError: Unknown image file format. One of "
        "JPEG, JPEG XL, PNG, GIF, BMP, WebP required. (--verbose shows the traceback)"
    )
    # With --verbose the error leaves main() as raised, and Python prints its traceback.
    from tfthroughput.cli import main

    with pytest.raises(tf.errors.InvalidArgumentError, match="Unknown image file format"):
        main([*args, "--verbose"])


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    process = interruptible_popen(
        [sys.executable, "-m", "tfthroughput.cli", "demo", "--images", "96", "--epochs", "50"]
        + ["--log-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONUNBUFFERED": "1"},
    )
    interrupts = 0
    try:
        for line in process.stdout:
            # After the first epoch's line, `fit` is running its second epoch (of 50): the
            # interrupt lands inside training, however slowly a loaded machine got there.
            if line.startswith("  epoch 1/50"):
                break
        else:
            pytest.fail(f"the demo ended before its first epoch: {process.wait(60)=}")
        signals = signal_state(process.pid)
        # A Ctrl-C that lands while a finaliser (`__del__`) runs is ignored by CPython, and on
        # a loaded machine that happens now and then: as a user would, press it again.
        while process.poll() is None and interrupts < 5:
            process.send_signal(signal.SIGINT)
            interrupts += 1
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                continue
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, (signals, stderr)
    lines = stderr.splitlines()
    assert lines[-1] == "tfthroughput demo: interrupted", stderr
    if interrupts == 1:
        assert lines == ["tfthroughput demo: interrupted"]
    else:  # the ignored ones left CPython's "Exception ignored in ..." report, and only that
        assert "Exception ignored in" in stderr, stderr


@pytest.mark.parametrize("command", [(), ("demo",), ("info",), ("run",), ("compare",)])
def test_every_command_has_help(command):
    result = run_cli(*command, "--help", timeout=60)
    assert result.returncode == 0
    assert result.stdout.startswith("usage: tfthroughput")
    assert "--verbose" in result.stdout
