"""GPU-Util on a real GPU: the monitor's sampler at its default interval vs polling the point value.

Needs an NVIDIA GPU, pynvml and psutil, and PyTorch or JAX for the load; no TensorFlow (the
sampler core does not import it). For each load, GPU 0 runs bf16 matmul bursts (ON s busy,
OFF s idle) for `--seconds`, while, over the same window:

- the true busy share is measured (time inside the synchronised bursts / the window);
- one thread polls `nvmlDeviceGetUtilizationRates` every 1 s and another every 0.1 s (what
  point-polling monitors do);
- the package's `Sampler` reads `default_sources(["utilization_percent"])` at its default
  interval (1 s) and its window is collected at the end: the mean of NVML's buffer samples.

Before that it measures the driver's GPU-Util sampling period on this GPU, from the buffer's
timestamps and from how often the point value changes when polled every 10 ms.

    python benchmarks/gpu_aliasing_check.py [--seconds 12]

`--load none` sleeps instead of running bursts (no GPU work, no PyTorch or JAX needed): it
checks the script's plumbing, e.g. against the test suite's fake NVML library.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import warnings
from itertools import pairwise

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])

from tfthroughput.hardware.discovery import default_sources  # noqa: E402
from tfthroughput.hardware.sampler import SampleKey, Sampler  # noqa: E402
from tfthroughput.hardware.source import MonitoringWarning  # noqa: E402

LOADS = ((0.10, 0.10), (0.30, 0.70), (0.05, 0.45))  # (busy s, idle s) per burst
UTIL = SampleKey("gpu0", "utilization_percent")


class PointPoller:
    """Polls GPU-Util through `nvmlDeviceGetUtilizationRates` every `interval` seconds."""

    def __init__(self, pynvml, handle, interval: float) -> None:
        self.values: list[float] = []
        self._read = lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.values.append(self._read())

    def __enter__(self) -> PointPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()


def make_burst(load: str):
    """(description, function running bf16 matmuls on GPU 0 for about the given seconds)."""
    if load == "none":
        return "no GPU work (plumbing check)", time.sleep
    try:
        import torch

        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

        def torch_burst(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                a @ a
                torch.cuda.synchronize()

        torch_burst(1.0)  # warm up kernels and clocks
        return "torch bf16 8192^2 matmuls", torch_burst
    except ImportError:
        import jax
        import jax.numpy as jnp

        b = jnp.ones((8192, 8192), jnp.bfloat16)
        matmul = jax.jit(lambda x: x @ x)

        def jax_burst(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                matmul(b).block_until_ready()

        jax_burst(1.0)
        return "jax bf16 8192^2 matmuls", jax_burst


def run_bursts(burst, on: float, off: float, seconds: float) -> float:
    """Bursts for `seconds`; returns the share of the time spent inside them."""
    start = time.monotonic()
    busy = 0.0
    while time.monotonic() - start < seconds:
        began = time.monotonic()
        burst(on)
        busy += time.monotonic() - began
        time.sleep(off)
    return busy / (time.monotonic() - start)


def sampling_period(pynvml, handle, burst) -> tuple[float | None, int, float | None]:
    """The driver's GPU-Util period: from buffer timestamps, and from point-value changes."""
    changes, previous = [], None
    probe = threading.Thread(target=run_bursts, args=(burst, 0.1, 0.1, 3.0), daemon=True)
    probe.start()
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        value = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
        if value != previous:
            changes.append(time.monotonic())
            previous = value
        time.sleep(0.01)
    probe.join()
    change_gap = (
        statistics.median(b - a for a, b in pairwise(changes)) if len(changes) > 2 else None
    )
    try:
        _, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
        stamps = sorted(sample.timeStamp for sample in samples if sample.timeStamp)
        buffer_gap = statistics.median(b - a for a, b in pairwise(stamps)) / 1e6
    except (pynvml.NVMLError, statistics.StatisticsError):
        buffer_gap = None
    return buffer_gap, len(changes), change_gap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="length of each load")
    parser.add_argument("--load", choices=("matmul", "none"), default="matmul")
    args = parser.parse_args()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MonitoringWarning)
        sources = [s for s in default_sources(["utilization_percent"]) if s.name == "gpu0"]
    for warning in caught:
        print(f"warning: {warning.message}")
    if not sources:
        print("no GPU visible through NVML: nothing to compare")
        return 1
    from tfthroughput.hardware.nvml import nvml

    pynvml = nvml()
    device = sources[0].device
    handle = pynvml.nvmlDeviceGetHandleByIndex(device.nvml_index)
    description, burst = make_burst(args.load)
    print(f"gpu0 = {device.name} ({device.uuid}); load: {description}")
    buffer_gap, changes, change_gap = sampling_period(pynvml, handle, burst)
    print(
        "GPU-Util sampling period: buffer timestamps "
        f"{'n/a' if buffer_gap is None else f'{buffer_gap * 1000:.0f} ms'} apart (median); "
        f"point value polled every 10 ms for 3 s: {changes} changes, "
        f"{'n/a' if change_gap is None else f'{change_gap * 1000:.0f} ms'} apart (median)"
    )
    print(
        "| load (burst on / off) | true busy share | polling 1 s | polling 0.1 s "
        "| monitor's sampler at its default interval |"
    )
    print("|---|---|---|---|---|")
    rows = []
    with Sampler(sources) as sampler:  # the default interval, as GPUMonitor uses it
        for on, off in LOADS:
            sampler.collect(sample_now=True)  # the window starts with the load
            with PointPoller(pynvml, handle, 1.0) as slow, PointPoller(pynvml, handle, 0.1) as fast:
                busy = run_bursts(burst, on, off, args.seconds)
            window = sampler.collect(sample_now=True)
            stats = window.get(UTIL)
            mean = None if stats is None else stats.mean
            count = window.buffer_samples.get(UTIL)
            slow_sd = statistics.pstdev(slow.values) if slow.values else float("nan")
            print(
                f"| {on:.2f} s / {off:.2f} s | {busy * 100:.0f} % "
                f"| {statistics.fmean(slow.values or [float('nan')]):.1f} % "
                f"({len(slow.values)} reads, sd {slow_sd:.1f}) "
                f"| {statistics.fmean(fast.values or [float('nan')]):.1f} % "
                f"| {'n/a' if mean is None else f'{mean:.1f} %'} "
                f"({'point reads' if count is None else f'{count} buffer samples'}) |"
            )
            rows.append((busy * 100, statistics.fmean(slow.values or [0.0]), mean))
    worst_poll = max(abs(true - slow) for true, slow, _ in rows)
    worst_sampler = max(abs(true - mean) for true, _, mean in rows if mean is not None)
    print(
        f"SUMMARY gpu aliasing: worst |GPU-Util - true busy share| over {len(rows)} loads: "
        f"polling 1 s {worst_poll:.1f} points, monitor's sampler at 1 s {worst_sampler:.1f} "
        f"points (ratio {worst_poll / max(worst_sampler, 1e-9):.1f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
