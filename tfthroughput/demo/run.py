"""The demo behind ``tfthroughput demo``: one small image task, trained twice.

It writes a synthetic JPEG dataset (three classes of shapes under noise), trains the same
small CNN on a naive ``tf.data`` pipeline and on :func:`~tfthroughput.build_pipeline`, with
:class:`~tfthroughput.GPUMonitor` on both (four windows per epoch, so TensorBoard shows points
inside each epoch, beside Keras's batch-level loss), then compares them, runs
:func:`~tfthroughput.diagnose` on the naive pipeline, writes the diagnosis and the comparison
into the runs they concern as TensorBoard text, and writes the HTML report comparing the runs.
Needs no network and no GPU.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable

from tfthroughput._validation import check_writable_folder
from tfthroughput.demo.comparison import RunSummary, comparison_markdown, comparison_table
from tfthroughput.demo.image_task import naive_pipeline, small_cnn
from tfthroughput.demo.previous_runs import TUNE_RUN, replace_previous_runs
from tfthroughput.demo.synthetic_images import CLASSES, image_paths, labels_of, write_images
from tfthroughput.demo.training import train_both
from tfthroughput.diagnosis.diagnosis_report import DiagnosisReport
from tfthroughput.diagnosis.training_diagnosis import diagnose
from tfthroughput.monitor import text_entries
from tfthroughput.report.html import write_report

# Text tag of the demo's comparison, in the build_pipeline run.
COMPARISON_TAG = "demo/comparison"

Print = Callable[[str], None]


def write_text(run_dir: str, tag: str, markdown: str) -> None:
    text_entries.write_text(run_dir, {tag: markdown})


def gpu_status() -> str:
    """One line on what the monitor can sample here."""
    from tfthroughput.hardware.discovery import find_gpus

    gpus = find_gpus()
    if not gpus.devices:
        return f"off ({gpus.reason}); host CPU/RAM are still monitored"
    return ", ".join(f"gpu{gpu.index}: {gpu.name}" for gpu in gpus.devices)


def tune_demo(log_dir: str):
    """tune on its own launch-bound workload; the table also goes to ``log_dir``'s Text tab."""
    from tfthroughput.demo.tune_workload import demo_workload
    from tfthroughput.tuning import tune

    return tune(
        **demo_workload(),
        time_budget=8,
        steps=64,
        xla=False,
        pipeline=False,
        max_steps_per_execution=16,
        log_dir=log_dir,
    )


def run_demo(
    *,
    images: int = 1280,
    epochs: int = 3,
    batch_size: int = 32,
    log_dir: str = "logs/tfthroughput-demo",
    data_dir: str | None = None,
    echo: Print = print,
    tune: bool = True,
) -> list[RunSummary]:
    """Run the whole demo; returns the two runs' summaries (naive first).

    With ``tune``, :func:`tfthroughput.tune` then runs on its own launch-bound workload
    (:func:`tfthroughput.demo.tune_workload.demo_workload`), its table written to ``log_dir/tune``.

    Raises:
        ValueError: If ``log_dir`` or ``data_dir`` cannot be created or written to (checked
            before anything is trained).
    """
    started = time.perf_counter()
    log_dir = check_writable_folder("log_dir", log_dir)
    data_dir = check_writable_folder("data_dir", data_dir or os.path.join(log_dir, "data"))
    paths = _synthetic_images(data_dir, images, echo)
    labels = labels_of(paths)
    echo(f"GPU metrics: {gpu_status()}")
    replace_previous_runs(log_dir, echo)
    runs = train_both(paths, labels, epochs, batch_size, log_dir, echo)
    echo("[4/4] Diagnosing the naive pipeline")
    report = diagnose(small_cnn(), naive_pipeline(paths, labels, batch_size), steps=10, repeats=1)
    _write_texts(log_dir, report, runs)
    for text in (comparison_table(runs), str(report)):
        echo("")
        echo(text)
    echo("")
    if tune:
        echo("Tuning a small launch-bound model with tfthroughput.tune (about 8 s):")
        echo(str(tune_demo(os.path.join(log_dir, TUNE_RUN))))
        echo("")
    _closing_lines(log_dir, time.perf_counter() - started, echo)
    return runs


def _synthetic_images(data_dir: str, images: int, echo: Print) -> list[str]:
    """The JPEGs in ``data_dir``: reused when there are ``images`` of them, else written anew."""
    paths = image_paths(data_dir)
    if len(paths) == images:
        echo(f"[1/4] Reusing {images} JPEGs in {data_dir}")
        return paths
    echo(f"[1/4] Writing {images} synthetic JPEGs ({len(CLASSES)} classes) to {data_dir}")
    for path in paths:
        os.remove(path)
    return write_images(data_dir, images, echo=echo)


def _write_texts(log_dir: str, report: DiagnosisReport, runs: list[RunSummary]) -> None:
    """The diagnosis and the comparison, each into the run it concerns (GPUMonitor's run,
    which the report reads too)."""
    report.write_to_tensorboard(os.path.join(log_dir, "naive", "hardware"))
    write_text(
        os.path.join(log_dir, "build_pipeline", "hardware"),
        COMPARISON_TAG,
        comparison_markdown(runs),
    )


def _closing_lines(log_dir: str, seconds: float, echo: Print) -> None:
    """The HTML report, the time taken, and how to open the runs in TensorBoard."""
    try:
        report_line = f"One page comparing both runs: {shlex.quote(write_report(log_dir))}"
    except ImportError as error:  # matplotlib is an extra
        report_line = f"No HTML report: {error}"
    echo(f"Done in {seconds:.0f} s.")
    echo(report_line)
    echo("TensorBoard (windows inside each epoch; the diagnosis in the Text tab):")
    echo(f"  tensorboard --logdir {shlex.quote(log_dir)}")
