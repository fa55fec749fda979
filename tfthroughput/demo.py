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

import math
import os
import shlex
import time
import warnings
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from tfthroughput._validation import check_writable_folder
from tfthroughput.data.pipeline import build_pipeline
from tfthroughput.demo_comparison import RunSummary, comparison_markdown, comparison_table
from tfthroughput.demo_runs import TUNE_RUN, replace_previous_runs
from tfthroughput.diagnosis.diagnosis_report import DiagnosisReport
from tfthroughput.diagnosis.training_diagnosis import diagnose
from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.monitor import text_entries
from tfthroughput.monitor.gpu_monitor import GPUMonitor
from tfthroughput.report.html import write_report
from tfthroughput.report.steady_epochs import steady_median

CLASSES = ("disc", "square", "stripes")
WINDOWS_PER_EPOCH = 4
# Text tag of the demo's comparison, in the build_pipeline run.
COMPARISON_TAG = "demo/comparison"
STORED_SIZE = 192  # JPEGs are stored larger than the model input, so decoding+resizing costs
INPUT_SIZE = 48

Print = Callable[[str], None]


def window_steps_for(steps_per_epoch: int, windows: int = WINDOWS_PER_EPOCH) -> int:
    """Steps per window: the divisor of ``steps_per_epoch`` nearest ``windows`` per epoch.

    Keras's ``TensorBoard(update_freq=N)`` writes its ``epoch_*`` charts only when its count
    of training batches is a multiple of ``N`` at the epoch's end, so ``N`` must divide the
    steps per epoch (on a tie, the smaller window).

    Example:
        >>> window_steps_for(40), window_steps_for(38), window_steps_for(7), window_steps_for(2)
        (10, 19, 1, 1)
    """
    divisors = [d for d in range(1, steps_per_epoch + 1) if steps_per_epoch % d == 0]
    return min(divisors, key=lambda d: (abs(steps_per_epoch / d - windows), d))


def write_images(folder: str, count: int, seed: int = 0, echo: Print = print) -> list[str]:
    """Write ``count`` JPEGs, cycling through the classes; returns their paths (sorted)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:STORED_SIZE, 0:STORED_SIZE]
    for label in CLASSES:
        os.makedirs(os.path.join(folder, label), exist_ok=True)
    step = max(1, count // 4)
    for index in range(count):
        label = CLASSES[index % len(CLASSES)]
        cx, cy = rng.integers(STORED_SIZE // 4, 3 * STORED_SIZE // 4, size=2)
        radius = rng.integers(STORED_SIZE // 10, STORED_SIZE // 5)
        if label == "disc":
            mask = (xx - cx) ** 2 + (yy - cy) ** 2 < radius**2
        elif label == "square":
            mask = (abs(xx - cx) < radius) & (abs(yy - cy) < radius)
        else:
            mask = (yy // max(2, radius // 3)) % 2 == 0
        image = rng.normal(90, 40, size=(STORED_SIZE, STORED_SIZE, 3))
        image[mask] += rng.uniform(80, 140, size=3)
        jpeg = tf.io.encode_jpeg(np.clip(image, 0, 255).astype(np.uint8), quality=90)
        tf.io.write_file(os.path.join(folder, label, f"{index:05d}.jpg"), jpeg)
        if (index + 1) % step == 0 or index + 1 == count:
            echo(f"  {index + 1}/{count} images")
    return image_paths(folder)


def image_paths(folder: str) -> list[str]:
    return sorted(tf.io.gfile.glob(os.path.join(folder, "*", "*.jpg")))


def labels_of(paths: list[str]) -> np.ndarray:
    return np.array([CLASSES.index(os.path.basename(os.path.dirname(p))) for p in paths], "int32")


def decode(data: tf.Tensor, label: tf.Tensor):
    image = tf.io.decode_jpeg(data, channels=3)
    image = tf.image.resize(image, (INPUT_SIZE, INPUT_SIZE)) / 255.0
    return image, label


def augment(image: tf.Tensor, label: tf.Tensor):
    return tf.image.random_flip_left_right(image), label


def naive_pipeline(paths: list[str], labels: np.ndarray, batch_size: int) -> tf.data.Dataset:
    """What many first pipelines look like: sequential map, no cache, no prefetch."""

    def load(path, label):
        return augment(*decode(tf.io.read_file(path), label))

    return tf.data.Dataset.from_tensor_slices((paths, labels)).map(load).batch(batch_size)


def tuned_pipeline(paths: list[str], labels: np.ndarray, batch_size: int) -> tf.data.Dataset:
    return build_pipeline(
        paths,
        labels=labels,
        read_fn=tf.io.read_file,
        preprocess_fn=decode,
        augment_fn=augment,
        cache=True,
        shuffle_buffer=len(paths),
        batch_size=batch_size,
        seed=0,
    )


def small_cnn() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((INPUT_SIZE, INPUT_SIZE, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(len(CLASSES)),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


class _EpochLine(keras.callbacks.Callback):
    """One short progress line per epoch (Keras's own would list every logged metric)."""

    def __init__(self, epochs: int, echo: Print) -> None:
        super().__init__()
        self.epochs = epochs
        self.echo = echo

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.echo(
            f"  epoch {epoch + 1}/{self.epochs}: loss {logs.get('loss', float('nan')):.3f}, "
            f"{logs.get('examples_per_second', float('nan')):,.0f} examples/s, "
            f"host CPU {logs.get('host_cpu_percent', float('nan')):.0f} %"
        )


def train(
    name: str,
    dataset,
    epochs: int,
    batch_size: int,
    log_dir: str,
    echo: Print = print,
    window_steps: int | str = "epoch",
) -> RunSummary:
    """Train the small CNN with the monitor (windows every ``window_steps``) and TensorBoard."""
    model = small_cnn()
    run_dir = os.path.join(log_dir, name)
    monitor = GPUMonitor(
        run_dir,
        interval=0.25,
        batch_size=batch_size,
        update_logs=True,
        update_freq=window_steps,
    )
    board = keras.callbacks.TensorBoard(run_dir, update_freq=window_steps)  # same x-axis
    callbacks = [monitor, board, _EpochLine(epochs, echo)]  # after the monitor: see its logs
    history = model.fit(
        dataset, epochs=epochs, callbacks=callbacks, verbose=0, shuffle=False
    ).history
    gpu_keys = sorted(
        k for k in history if k.startswith("gpu") and k.endswith("_utilization_percent")
    )
    per_gpu = [history[k] for k in gpu_keys]
    gpu_per_epoch = [float(np.mean(values)) for values in zip(*per_gpu, strict=True)]
    cpu_per_epoch = history.get("host_cpu_percent")
    return RunSummary(
        name=name,
        examples_per_second=steady_median(history["examples_per_second"]),
        epoch_seconds=steady_median(history["seconds"]),
        gpu_utilization_percent=steady_median(gpu_per_epoch) if gpu_per_epoch else None,
        cpu_percent=steady_median(cpu_per_epoch) if cpu_per_epoch else None,
        epochs=len(history["seconds"]),
    )


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
    from tfthroughput.tuning import tune
    from tfthroughput.tuning.workload import demo_workload

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
    (:func:`tfthroughput.tuning.workload.demo_workload`), its table written to ``log_dir/tune``.

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
    runs = _train_both(paths, labels, epochs, batch_size, log_dir, echo)
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


def _train_both(
    paths: list[str],
    labels: np.ndarray,
    epochs: int,
    batch_size: int,
    log_dir: str,
    echo: Print,
) -> list[RunSummary]:
    """Train the small CNN on the naive pipeline, then on build_pipeline, each monitored."""
    window_steps = window_steps_for(math.ceil(len(paths) / batch_size))
    runs = []
    for step, (name, make) in enumerate(
        (("naive", naive_pipeline), ("build_pipeline", tuned_pipeline)), start=2
    ):
        echo(f"[{step}/4] Training a small CNN on the {name} pipeline ({epochs} epochs)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MonitoringWarning)  # said once, above
            dataset = make(paths, labels, batch_size)
            runs.append(train(name, dataset, epochs, batch_size, log_dir, echo, window_steps))
    return runs


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
