"""Two real short fits monitored by GPUMonitor with fake hardware, as the report reads them."""

from __future__ import annotations

import os
import statistics
import warnings

import keras
import numpy as np
from events import read_scalars
from fakes import FakeSource

from tfthroughput import GPUMonitor, MonitoringWarning
from tfthroughput.diagnosis import DiagnosisReport, Recommendation

EPOCHS = 3
BATCH_SIZE = 8
STEPS_PER_EPOCH = 4
# Per-epoch readings of the fake GPU in each run: (GPU-Util %, SM activity %, memory GiB).
READINGS = {
    "naive": [(20.0, 10.0, 3.0), (40.0, 25.0, 3.5), (30.0, 15.0, 3.25)],
    "build_pipeline": [(60.0, 45.0, 4.0), (90.0, 70.0, 4.5), (80.0, 60.0, 4.25)],
}
DIAGNOSIS = DiagnosisReport(
    batch_size=BATCH_SIZE,
    steps=STEPS_PER_EPOCH,
    repeats=1,
    input_batches_per_second=10.0,
    compute_batches_per_second=100.0,
    fit_batches_per_second=9.5,
    input_bound_fraction=0.905,
    verdict="input-bound",
    recommendations=(Recommendation("build_pipeline", "input <b>alone</b> is 10x slower"),),
)


class _EpochDial(keras.callbacks.Callback):
    """Tells the fake sources which epoch is running (listed before the monitor)."""

    epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch


def _sources(name: str, dial: _EpochDial, gpu: bool):
    def factory():
        host = FakeSource("host", {"cpu_percent": 50.0 if name == "naive" else 90.0})
        if not gpu:
            return [host]
        readings = READINGS[name]
        fake_gpu = FakeSource(
            "gpu0",
            lambda _: dict(
                zip(
                    ("utilization_percent", "sm_activity_percent", "memory_used_gib"),
                    readings[dial.epoch],
                    strict=True,
                )
            ),
        )
        return [fake_gpu, host]

    return factory


def write_monitored_runs(log_dir, *, gpu: bool = True) -> None:
    """``<log_dir>/naive`` then ``<log_dir>/build_pipeline``, each with Keras's TensorBoard and
    GPUMonitor (``hardware``); a diagnosis written into ``<log_dir>/naive/diagnosis``."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS_PER_EPOCH * BATCH_SIZE, 3)).astype("float32")
    for name in READINGS:
        run_dir = os.path.join(log_dir, name)
        dial = _EpochDial()
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        monitor = GPUMonitor(
            run_dir, interval=0.05, batch_size=BATCH_SIZE, sources=_sources(name, dial, gpu)
        )
        callbacks = [dial, keras.callbacks.TensorBoard(run_dir), monitor]
        with warnings.catch_warnings():
            # The naive run's last epoch reads GPU-Util 30 % against SM activity 15 %: the
            # monitor rightly warns that GPU-Util overstates the work (tested where it belongs,
            # in the monitor's tests); the report's tests only read the files.
            warnings.filterwarnings(
                "ignore", message=r".*GPU-Util overstates the work", category=MonitoringWarning
            )
            model.fit(
                x,
                x.sum(axis=1),
                batch_size=BATCH_SIZE,
                epochs=EPOCHS,
                callbacks=callbacks,
                verbose=0,
            )
    DIAGNOSIS.write_to_tensorboard(os.path.join(log_dir, "naive", "diagnosis"))


def medians_from_event_files(run_dir) -> dict[str, float]:
    """Each scalar tag's median over epochs, read with TensorFlow's own record reader."""
    return {
        tag: statistics.median(value for _, value in points)
        for tag, points in read_scalars(run_dir).items()
    }
