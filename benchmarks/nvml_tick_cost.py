"""What one sampler tick costs on GPUs read from NVML's sample buffers vs point queries.

Runs through the test suite's fake `libnvidia-ml.so.1` (tests/fake_nvml; needs a C compiler),
not a real driver: the fake's own work per call is a few arithmetic operations, so the figures
are this package's and pynvml's cost per tick (ctypes calls, pynvml's sample arrays, the Python
around them) on top of which a real driver adds its own. Each tick reads two fake GPUs, every
GPU metric, in three variants run as alternating child processes (the fake's buffers are chosen
when it loads):

- point: no sample buffers, every metric through its point query (the old path);
- buffer: GPU-Util, memory-utilization and power buffers with 5 new samples per buffer per
  tick (what a 1 s tick finds on an H200, whose driver samples GPU-Util every ~200 ms);
- buffer, nothing new: the same buffers read again at once, so NVML answers "not found" and a
  point reading is taken as the fallback (what faster ticks mostly find).

The time inside `Sampler.sample_once` is measured per tick; each child reports its median, the
summary the median over rounds, and the share of a 1 s and a 0.1 s interval one tick takes (the
monitor's direct-cost targets are 0.5 % at 1 s and 2 % at 0.1 s, host source and hooks included).

    python benchmarks/nvml_tick_cost.py [--rounds 5] [--ticks 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERIOD_MS = 2  # fake buffer spacing; ticks are PERIOD_MS * 5 apart, so 5 new samples each

VARIANTS = {
    "point": {},
    "buffer": {
        "FAKE_NVML_SAMPLES_GPU": "100,0,0,0,0",
        "FAKE_NVML_SAMPLES_MEMORY": "30,10",
        "FAKE_NVML_SAMPLES_POWER": "150000,250000",
        "FAKE_NVML_SAMPLES_PERIOD_MS": str(PERIOD_MS),
    },
}
VARIANTS["buffer, nothing new"] = {**VARIANTS["buffer"], "FAKE_NVML_SAMPLES_PERIOD_MS": "60000"}


def child(ticks: int) -> None:
    """Runs in the child: median seconds of one `sample_once` over the GPU sources."""
    from tfthroughput.hardware.discovery import default_sources
    from tfthroughput.hardware.metrics import GPU_METRICS
    from tfthroughput.hardware.sampler import Sampler

    sources = default_sources([metric.name for metric in GPU_METRICS])
    assert [source.name for source in sources] == ["gpu0", "gpu1"], sources
    sampler = Sampler(sources, interval=1.0)
    time.sleep(0.1)
    sampler.sample_once()  # the first read takes the whole buffer and identifies its clock
    sampler.collect()
    seconds, per_tick = [], {}
    for tick in range(ticks):
        time.sleep(PERIOD_MS * 5 / 1000)
        start = time.perf_counter()
        sampler.sample_once()
        seconds.append(time.perf_counter() - start)
        if tick % 50 == 49:  # windows of 50 ticks, as small as the monitor's epochs may be
            window = sampler.collect()
            per_tick = {"/".join(k): n / 50 for k, n in window.buffer_samples.items()}
    sampler.stop()
    print(json.dumps({"median": statistics.median(seconds), "buffer_samples": per_tick}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.ticks)
        return

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from fake_nvml import ENV_VARS, build_fake_nvml

    lib_dir = build_fake_nvml(tempfile.mkdtemp(prefix="tfthroughput-fake-nvml-"))
    base_env = {key: value for key, value in os.environ.items() if key not in ENV_VARS}
    base_env["LD_LIBRARY_PATH"] = str(lib_dir)
    base_env["PYTHONPATH"] = ROOT + os.pathsep + base_env.get("PYTHONPATH", "")
    names = list(VARIANTS)
    medians: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            result = subprocess.run(
                [sys.executable, __file__, "--child", "--ticks", str(args.ticks)],
                env={**base_env, **VARIANTS[name]},
                capture_output=True,
                text=True,
                check=True,
            )
            out = json.loads(result.stdout.strip().splitlines()[-1])
            medians[name].append(out["median"])
            if round_index == 0:
                print(f"{name}: buffer samples per tick {out['buffer_samples']}")
    cost = {name: statistics.median(values) for name, values in medians.items()}
    for name in names:
        per_tick = cost[name]
        print(
            f"{name:>20}: {per_tick * 1e6:7.0f} us per tick of 2 GPUs "
            f"(rounds {', '.join(f'{v * 1e6:.0f}' for v in medians[name])}); "
            f"{per_tick * 100:.3f} % of a 1 s interval, {per_tick * 1000:.2f} % of 0.1 s"
        )
    print(
        f"nvml tick cost (fake NVML, 2 GPUs, median of {args.rounds} rounds): buffer "
        f"{cost['buffer'] * 1e6:.0f} us vs point {cost['point'] * 1e6:.0f} us per tick "
        f"({cost['buffer'] / cost['point']:.2f}x; nothing new "
        f"{cost['buffer, nothing new'] / cost['point']:.2f}x); buffer tick = "
        f"{cost['buffer'] * 100:.3f} % of a 1 s interval (target <= 0.5 % for the whole monitor)"
    )


if __name__ == "__main__":
    main()
