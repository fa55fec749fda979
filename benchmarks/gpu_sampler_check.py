"""Compare the sampler core with `nvidia-smi` on a real GPU under a real load.

Needs an NVIDIA GPU, pynvml and psutil, and PyTorch or JAX for the load; no TensorFlow (the
sampler core does not import it). Three phases on GPU 0: idle, a bf16 matmul loop, idle again.
For each phase it prints the sampler's mean GPU-Util and memory next to `nvidia-smi`'s over the
same window (nvidia-smi polled every 100 ms, each line stamped as it arrives), and the GPM SM and
tensor activity where the GPU supports GPM.

    python benchmarks/gpu_sampler_check.py [--seconds 10] [--interval 0.1]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
sys.path.insert(0, __file__.rsplit("/", 1)[0])  # the shared nvidia-smi poller

from _nvidia_smi import NvidiaSmiPoller  # noqa: E402

from tfthroughput.hardware.discovery import default_sources  # noqa: E402
from tfthroughput.hardware.sampler import SampleKey, Sampler  # noqa: E402
from tfthroughput.hardware.source import MonitoringWarning

METRICS = [
    "utilization_percent",
    "memory_used_gib",
    "sm_activity_percent",
    "tensor_activity_percent",
]


def make_load():
    """A function running bf16 matmuls on GPU 0 for a given number of seconds."""
    try:
        import torch

        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

        def run(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for _ in range(20):
                    a @ a
                torch.cuda.synchronize()

        return "torch bf16 8192^2 matmul", run
    except ImportError:
        import jax
        import jax.numpy as jnp

        a = jnp.ones((8192, 8192), jnp.bfloat16)
        matmul = jax.jit(lambda x: x @ x)

        def run(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                matmul(a).block_until_ready()

        return "jax bf16 8192^2 matmul", run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the load phase")
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MonitoringWarning)
        sources = default_sources(METRICS)
    gpus = [source for source in sources if source.name.startswith("gpu")]
    for warning in caught:
        print(f"warning: {warning.message}")
    if not gpus:
        print("no GPU visible through NVML: nothing to compare")
        return 1
    print("GPUs: " + ", ".join(f"{s.name}={s.device.name} ({s.device.uuid})" for s in gpus))
    load_name, run_load = make_load()
    smi = NvidiaSmiPoller(gpus[0].device.uuid)
    results = []
    with Sampler(gpus, args.interval) as sampler:
        time.sleep(1.0)
        sampler.collect()
        for phase, action in (
            ("idle", lambda: time.sleep(3.0)),
            (f"load: {load_name}", lambda: run_load(args.seconds)),
            ("idle again", lambda: time.sleep(3.0)),
        ):
            start = time.monotonic()
            action()
            end = time.monotonic()
            stats = sampler.collect(sample_now=True)
            results.append((phase, stats, smi.window(start, end)))
    smi.stop()
    for phase, stats, (smi_util, smi_memory_mib, smi_rows) in results:
        util = stats.get(SampleKey("gpu0", "utilization_percent"))
        memory = stats.get(SampleKey("gpu0", "memory_used_gib"))
        sm = stats.get(SampleKey("gpu0", "sm_activity_percent"))
        tensor = stats.get(SampleKey("gpu0", "tensor_activity_percent"))
        print(
            f"{phase}: sampler GPU-Util {util.mean:.1f} % ({util.count} samples), "
            f"memory {memory.mean * 1024:.0f} MiB | nvidia-smi {smi_util:.1f} %, "
            f"{smi_memory_mib:.0f} MiB ({smi_rows} rows) | GPM SM activity "
            f"{'n/a' if sm is None else f'{sm.mean:.1f} %'}, tensor activity "
            f"{'n/a' if tensor is None else f'{tensor.mean:.1f} %'}"
        )
    _, load_stats, (load_smi_util, _, _) = results[1]
    print(
        f"SUMMARY gpu check: under load sampler GPU-Util "
        f"{load_stats[SampleKey('gpu0', 'utilization_percent')].mean:.1f} % vs nvidia-smi "
        f"{load_smi_util:.1f} %; GPM "
        f"{'read' if SampleKey('gpu0', 'sm_activity_percent') in load_stats else 'not available'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
