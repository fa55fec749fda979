"""Check GPUMonitor end to end on a real GPU under Keras's JAX backend, without TensorFlow.

For the GPU machine (Python with jax, pynvml, psutil and tensorboard; no TensorFlow; Keras 3
installed from carried wheels with `namex` and `optree`). Trains small Keras models on NumPy
arrays with `GPUMonitor(interval=0.1)` and compares, for every epoch, what the monitor logged
with what `nvidia-smi` saw over the same epoch (polled every 100 ms, each line stamped as it
arrives):

- GPU-Util (`gpu0/utilization_percent/mean`) against `utilization.gpu`;
- memory (`gpu0/memory_used_gib/mean`) against `memory.used`;
- energy: the monitor's `gpu0/energy_joules` where it logs one, against mean power x epoch time
  (`gpu0/power_watts/mean` x `epoch/seconds`), else the latter alone;
- SM and tensor activity (GPM, Hopper and newer), `gpu0/busy_but_idle_percent`, and whether the
  monitor warned that GPU-Util overstates the work, for a large bf16 MLP and for tiny-kernel
  models (width 16, batch 32; once more with `steps_per_execution=64`, which keeps the GPU
  launching tiny kernels back to back).

Each model's epochs are sized to about `--epoch-seconds` from a short calibration fit. Prints
one row per epoch and ends with a one-line summary.

    KERAS_BACKEND=jax python benchmarks/gpu_keras_jax_check.py [--epochs 3] [--epoch-seconds 5]

`--allow-cpu` lets JAX run on the CPU (to check the script's plumbing with a fake NVML library
and a fake `nvidia-smi`); without it the script refuses to run unless JAX has a GPU.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("KERAS_BACKEND", "jax")
# JAX would otherwise reserve 75 % of GPU memory at start, so memory.used would not follow the
# model; both sides still read the same device-wide figure.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The shared nvidia-smi poller, also when run through runpy (which adds no folder to the path).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from _nvidia_smi import NvidiaSmiPoller  # noqa: E402

from tfthroughput import GPUMonitor, MonitoringWarning  # noqa: E402
from tfthroughput.hardware.discovery import discover_sources  # noqa: E402
from tfthroughput.report.run_comparison import compare_runs  # noqa: E402

INTERVAL = 0.1
# name -> (hidden width, hidden layers, input features, batch size, steps_per_execution, policy)
MODELS = {
    "mlp4096-bf16": (4096, 3, 1024, 2048, 1, "mixed_bfloat16"),
    "tiny16": (16, 2, 32, 32, 1, "float32"),
    "tiny16-spe64": (16, 2, 32, 32, 64, "float32"),
}
# Largest input array a model's epoch may hold, so a fast model does not fill host RAM.
MAX_INPUT_BYTES = 2 << 30


class EpochClock(keras.callbacks.Callback):
    """Monotonic (start, end) of each epoch; listed before the monitor."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: dict[int, list[float]] = {}

    def on_epoch_begin(self, epoch, logs=None):
        self.spans[epoch] = [time.monotonic(), math.nan]

    def on_epoch_end(self, epoch, logs=None):
        self.spans[epoch][1] = time.monotonic()


def build(name: str) -> tuple[keras.Model, int, int]:
    width, layers, features, batch, per_execution, policy = MODELS[name]
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        hidden = [keras.layers.Dense(width, activation="relu") for _ in range(layers)]
        model = keras.Sequential(
            [keras.Input((features,)), *hidden, keras.layers.Dense(1, dtype="float32")]
        )
    finally:
        keras.config.set_dtype_policy(previous)
    model.compile(optimizer="adam", loss="mse", steps_per_execution=per_execution)
    return model, features, batch


def arrays(steps: int, batch: int, features: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).normal(size=(steps * batch, features)).astype("float32")
    return x, x[:, :1] * 0.5


def steps_for(model, features: int, batch: int, seconds: float) -> int:
    """Steps per epoch for about `seconds`, from a timed fit after a compiling one."""
    per_execution = model.steps_per_execution
    probe = 20 * per_execution
    x, y = arrays(probe, batch, features)
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)  # traces and compiles
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
    per_step = (time.perf_counter() - start) / probe
    most = MAX_INPUT_BYTES // (batch * features * 4)
    steps = int(min(max(seconds / per_step, 2 * per_execution), most))
    return max(per_execution, steps // per_execution * per_execution)


def energy_tag(scalars: dict) -> str | None:
    return next((tag for tag in sorted(scalars) if tag.startswith("gpu0/energy_joules")), None)


def run_model(name: str, args, smi: NvidiaSmiPoller, log_root: str) -> list[dict]:
    model, features, batch = build(name)
    steps = steps_for(model, features, batch, args.epoch_seconds)
    x, y = arrays(steps, batch, features)
    clock = EpochClock()
    log_dir = os.path.join(log_root, name)
    monitor = GPUMonitor(log_dir, interval=INTERVAL, batch_size=batch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MonitoringWarning)
        model.fit(x, y, batch_size=batch, epochs=args.epochs, verbose=0, callbacks=[clock, monitor])
    overstated = [w for w in caught if "overstates" in str(w.message)]
    for warning in caught:
        if warning not in overstated and issubclass(warning.category, MonitoringWarning):
            print(f"  warning ({name}): {warning.message}")
    scalars = {tag: dict(points) for tag, points in compare_runs(log_dir).runs[0].scalars.items()}
    energy = energy_tag(scalars)
    rows = []
    for epoch, (start, end) in sorted(clock.spans.items()):
        smi_util, smi_mib, smi_rows = smi.window(start, end)

        def logged(tag, epoch=epoch):
            return scalars.get(tag, {}).get(epoch, math.nan)

        rows.append(
            {
                "model": name,
                "epoch": epoch,
                "steps": steps,
                "seconds": logged("epoch/seconds"),
                "util": logged("gpu0/utilization_percent/mean"),
                "smi_util": smi_util,
                "mib": logged("gpu0/memory_used_gib/mean") * 1024,
                "smi_mib": smi_mib,
                "smi_rows": smi_rows,
                "samples": logged("gpu0/samples"),
                "sm": logged("gpu0/sm_activity_percent/mean"),
                "tensor": logged("gpu0/tensor_activity_percent/mean"),
                "busy_idle": logged("gpu0/busy_but_idle_percent"),
                "energy": logged(energy) if energy else math.nan,
                "power_time": logged("gpu0/power_watts/mean") * logged("epoch/seconds"),
                "warned": bool(overstated) and f"epoch {epoch}:" in str(overstated[0].message),
            }
        )
    keras.backend.clear_session()
    return rows


def show(value: float, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def print_table(rows: list[dict]) -> None:
    header = (
        "model",
        "ep",
        "steps",
        "s",
        "GPU-Util mon/smi %",
        "memory mon/smi MiB",
        "smi rows",
        "SM %",
        "tensor %",
        "busy-idle %",
        "energy J (counter / P x t)",
        "warned",
    )
    lines = [header]
    for row in rows:
        lines.append(
            (
                row["model"],
                str(row["epoch"]),
                str(row["steps"]),
                show(row["seconds"], 2),
                f"{show(row['util'])} / {show(row['smi_util'])}",
                f"{show(row['mib'], 0)} / {show(row['smi_mib'], 0)}",
                str(row["smi_rows"]),
                show(row["sm"]),
                show(row["tensor"]),
                show(row["busy_idle"]),
                f"{show(row['energy'])} / {show(row['power_time'])}",
                "yes" if row["warned"] else "",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


def summary(rows: list[dict]) -> str:
    util_gaps = [abs(r["util"] - r["smi_util"]) for r in rows if not math.isnan(r["smi_util"])]
    mib_gaps = [abs(r["mib"] - r["smi_mib"]) for r in rows if not math.isnan(r["smi_mib"])]
    energy = [r["energy"] / r["power_time"] - 1 for r in rows if not math.isnan(r["energy"])]
    tiny = [r for r in rows if r["model"].startswith("tiny")]
    worst_tiny = max(tiny, key=lambda r: r["busy_idle"] if not math.isnan(r["busy_idle"]) else -1)
    energy_text = (
        f"energy counter vs power x time within {max(abs(e) for e in energy):.1%}"
        if energy
        else "no energy tag logged (power x time only)"
    )
    return (
        f"SUMMARY gpu keras jax check: {len(rows)} epochs; GPU-Util monitor vs nvidia-smi "
        f"max gap {show(max(util_gaps, default=math.nan))} pp; memory max gap "
        f"{show(max(mib_gaps, default=math.nan), 0)} MiB; {energy_text}; tiny kernels "
        f"({worst_tiny['model']}): GPU-Util {show(worst_tiny['util'])} %, SM activity "
        f"{show(worst_tiny['sm'])} %, warned: {'yes' if any(r['warned'] for r in tiny) else 'no'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--epoch-seconds", type=float, default=5.0)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--allow-cpu", action="store_true", help="plumbing check without a GPU")
    args = parser.parse_args()

    import jax

    platform = jax.devices()[0].platform
    print(
        f"keras {keras.__version__} on {keras.config.backend()}; jax {jax.__version__} on "
        f"{platform} ({jax.devices()[0]}); tensorflow imported: {'tensorflow' in sys.modules}"
    )
    if keras.config.backend() != "jax" or (platform != "gpu" and not args.allow_cpu):
        print("needs Keras on the JAX backend with a GPU (KERAS_BACKEND=jax)")
        return 1
    gpus = [s for s in discover_sources(["utilization_percent"], host=False).sources]
    if not gpus:
        print("no GPU visible through NVML: nothing to compare")
        return 1
    device = gpus[0].device
    for source in gpus:
        source.close()
    print(f"gpu0 = {device.name} ({device.uuid})")
    smi = NvidiaSmiPoller(device.uuid)
    try:
        with tempfile.TemporaryDirectory() as log_root:
            rows = [row for name in args.models for row in run_model(name, args, smi, log_root)]
    finally:
        smi.stop()
    print_table(rows)
    print(f"tensorflow imported: {'tensorflow' in sys.modules}")
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
