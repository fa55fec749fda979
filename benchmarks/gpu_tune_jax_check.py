"""Check tfthroughput.tune on a real GPU under Keras's JAX backend, without TensorFlow.

For the GPU machine (Python 3.12 with jax[cuda], keras, pynvml, psutil; no TensorFlow). Tunes a
small MLP built under `mixed_bfloat16`, fed from NumPy arrays at batch 64 (a launch-bound
workload on a large GPU), then rebuilds the baseline and the chosen setup and times them side
by side (alternated rounds), reading GPU-Util and SM activity over each one's runs with the
package's hardware sampler (NVML). Prints tune's table (GPU-Util and SM % per trial), then
before/after examples/s and GPU-Util, and a one-line summary.

    KERAS_BACKEND=jax python benchmarks/gpu_tune_jax_check.py [--budget 120] [--steps 256]

`--allow-cpu` lets JAX run on the CPU (to check the plumbing); without it the script refuses
to run unless JAX has a GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
# JAX would otherwise reserve 75 % of the GPU's memory at start, hiding each trial's own peak.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfthroughput.hardware.discovery import discover_sources  # noqa: E402
from tfthroughput.hardware.sampler import Sampler  # noqa: E402
from tfthroughput.hardware.window_stats import SampleKey  # noqa: E402
from tfthroughput.tuning import tune  # noqa: E402
from tfthroughput.tuning.training.data import training_data  # noqa: E402
from tfthroughput.tuning.training.fit_runner import FitRunner  # noqa: E402

BATCH_SIZE = 64
FEATURES = 256


def build_model() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10, dtype="float32"),  # logits stay float32
        ]
    )
    model.compile(
        keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH_SIZE * 512, FEATURES)).astype("float32")
    return x, (np.abs(x[:, 0]) * 3).astype("int32") % 10


def timed_with_gpu(runner: FitRunner, sampler: Sampler | None, runs: int) -> tuple[float, dict]:
    """Median examples/s of ``runs`` runs, and mean GPU-Util / SM activity over them."""
    if sampler is not None:
        sampler.collect(sample_now=True)
    speeds = [runner.steps * runner.examples_per_step / runner.run() for _ in range(runs)]
    gpu = {}
    if sampler is not None:
        stats = sampler.collect(sample_now=True)
        for metric in ("utilization_percent", "sm_activity_percent"):
            value = stats.get(SampleKey("gpu0", metric))
            gpu[metric] = None if value is None else value.mean
    return statistics.median(speeds), gpu


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=120.0, help="tune's time budget, s")
    parser.add_argument("--steps", type=int, default=256, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=5, help="before/after alternated rounds")
    parser.add_argument("--allow-cpu", action="store_true", help="plumbing check without a GPU")
    args = parser.parse_args()

    import jax

    platform = jax.devices()[0].platform
    print(
        f"keras {keras.__version__} on {keras.config.backend()}, jax {jax.__version__} on "
        f"{platform} ({jax.devices()[0]}); tensorflow imported: {'tensorflow' in sys.modules}"
    )
    if keras.config.backend() != "jax" or (platform != "gpu" and not args.allow_cpu):
        print("needs Keras on JAX with a GPU (or --allow-cpu)")
        return 2
    keras.config.set_dtype_policy("mixed_bfloat16")
    x, y = data()
    start = time.perf_counter()
    result = tune(
        build_model, (x, y), batch_size=BATCH_SIZE, time_budget=args.budget, steps=args.steps
    )
    search = time.perf_counter() - start
    print(result)

    sources = discover_sources(["utilization_percent", "sm_activity_percent"], host=False)
    sampler = Sampler(sources.sources, interval=0.05).start() if sources.sources else None
    if sampler is None:
        print(f"GPU not sampled: {sources.gpus_off}")
    try:
        training = training_data((x, y), BATCH_SIZE)
        steps = max(args.steps, result.chosen.steps_per_execution)
        common = {"steps": steps, "seed": 0, "clock": time.perf_counter}
        before = FitRunner(
            None,
            build_model,
            training.feed(BATCH_SIZE, steps),
            examples_per_step=BATCH_SIZE,
            batch_size=BATCH_SIZE,
            **common,
        )
        size = result.chosen.batch_size or BATCH_SIZE
        after = FitRunner(
            result.chosen,
            build_model,
            training.feed(size, steps),
            examples_per_step=size,
            **common,
        )
        before.start()
        after.start()
        rows = {"before": [], "after": []}
        for index in range(args.rounds):
            order = (("before", before), ("after", after))
            for name, runner in order if index % 2 == 0 else order[::-1]:
                rows[name].append(timed_with_gpu(runner, sampler, 1))
    finally:
        if sampler is not None:
            sampler.stop()
    summary = {}
    for name, measured in rows.items():
        speed = statistics.median(s for s, _ in measured)
        utils = [g.get("utilization_percent") for _, g in measured if g.get("utilization_percent")]
        sms = [g.get("sm_activity_percent") for _, g in measured if g.get("sm_activity_percent")]
        util = statistics.fmean(utils) if utils else None
        sm = statistics.fmean(sms) if sms else None
        summary[name] = (speed, util, sm)
        setup = result.baseline if name == "before" else result.chosen
        print(
            f"{name}: {setup.changes_from(result.baseline)}: {speed:,.0f} examples/s, "
            f"GPU-Util {percent(util)}, SM activity {percent(sm)}"
        )
    (b_speed, b_util, _), (a_speed, a_util, _) = summary["before"], summary["after"]
    print(
        f"summary: tune chose {result.chosen.changes_from(result.baseline)} in {search:.0f} s: "
        f"{b_speed:,.0f} -> {a_speed:,.0f} examples/s ({a_speed / b_speed:.2f}x), GPU-Util "
        f"{percent(b_util)} -> {percent(a_util)}; tensorflow imported: "
        f"{'tensorflow' in sys.modules}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
