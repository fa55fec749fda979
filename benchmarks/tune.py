"""tune() on three kinds of workload: baseline vs tuned examples/s in one run, and the cost of
the search itself.

Workloads (CPU, TensorFlow backend):

- launch-bound: the issue's 32-64-1 MLP at batch 16 on a cached dataset (each step is mostly
  Keras's fixed per-step cost);
- input-bound: a small model fed by a pipeline with a sequential Python step of 4 ms per batch;
- compute-bound: a 256-512-512-1 MLP at batch 512 on in-memory arrays (16 timed steps a run).

For each: `tune(...)`, then the baseline and the chosen setup are rebuilt and timed side by
side (alternated, `--repeats` rounds of `--steps` steps, medians), independently of the
search's own measurement. Run:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/tune.py [--budget 90] [--repeats 5] [--steps 256]

The last line is a one-line summary with the three ratios.
"""

from __future__ import annotations

import argparse
import os
import time

import keras
import numpy as np
import tensorflow as tf

from tfthroughput.tuning import tune
from tfthroughput.tuning._arguments import training_data
from tfthroughput.tuning._measure import compare
from tfthroughput.tuning._pipeline import fill_cache, plan, rebuilt
from tfthroughput.tuning._runner import Runner


def mlp(features: int, hidden: tuple[int, ...]) -> keras.Model:
    layers = [keras.Input((features,))]
    layers += [keras.layers.Dense(width, activation="relu") for width in hidden]
    model = keras.Sequential([*layers, keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def arrays(examples: int, features: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, features)).astype("float32")
    return x, (x[:, :1] * 0.5).astype("float32")


def launch_bound():
    x, y = arrays(4096, 32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).cache()
    return (lambda: mlp(32, (64,))), data, None


def input_bound():
    def wait(value):
        time.sleep(0.004)
        return value

    def slow(a, b):
        return tf.ensure_shape(tf.numpy_function(wait, [a], tf.float32), [None, 32]), b

    x, y = arrays(2048, 32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).map(slow)
    return (lambda: mlp(32, (64,))), data, None


def compute_bound():
    return (lambda: mlp(256, (512, 512))), arrays(8192, 256), 512


# name -> (workload, timed steps per run in tune)
WORKLOADS = {
    "launch-bound": (launch_bound, 128),
    "input-bound": (input_bound, 128),
    "compute-bound": (compute_bound, 16),
}


def side_by_side(build, data, batch_size, result, steps: int, repeats: int):
    """Baseline vs chosen setup, rebuilt and timed alternately: medians of examples/s."""
    training = training_data(data, batch_size)
    spe = max(result.chosen.steps_per_execution, result.baseline.steps_per_execution)
    steps = max(steps, spe) // spe * spe
    examples = training.batch_size or int(next(iter(data))[0].shape[0])
    common = {"steps": steps, "examples_per_step": examples, "seed": 0}
    base = Runner(
        None,
        build,
        training.feed(batch_size, steps),
        clock=time.perf_counter,
        batch_size=batch_size,
        **common,
    )
    feed, warm = training.feed(result.chosen.batch_size, steps), None
    if result.chosen.pipeline:
        dataset = rebuilt(training, plan(training), result.chosen.batch_size)
        feed = {"x": dataset, "shuffle": False}
        warm = lambda: fill_cache(dataset, training.epoch_batches)  # noqa: E731
    tuned = Runner(result.chosen, build, feed, clock=time.perf_counter, warm_data=warm, **common)
    base.start()
    tuned.start()
    comparison = compare(base, tuned, repeats)
    return comparison


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=90.0, help="tune's time budget, s")
    parser.add_argument("--repeats", type=int, default=5, help="alternated A/B rounds")
    parser.add_argument("--steps", type=int, default=256, help="steps per timed run")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    ratios = {}
    for name, (make, steps) in WORKLOADS.items():
        build, data, batch_size = make()
        start = time.perf_counter()
        result = tune(build, data, batch_size=batch_size, time_budget=args.budget, steps=steps)
        search = time.perf_counter() - start
        print(f"\n=== {name}: tune() took {search:.1f} s ({len(result.trials)} trials)")
        print(result)
        timed = args.steps if steps >= args.steps else steps
        comparison = side_by_side(build, data, batch_size, result, timed, args.repeats)
        ratios[name] = comparison.ratio
        print(
            f"{name}: baseline {comparison.baseline_examples_per_second:,.0f} examples/s, "
            f"tuned ({result.chosen.changes_from(result.baseline)}) "
            f"{comparison.examples_per_second:,.0f} examples/s: {comparison.ratio:.2f}x "
            f"[{comparison.ratio_low:.2f}-{comparison.ratio_high:.2f}] over {args.repeats} "
            f"alternated rounds; search cost {search:.1f} s; load {os.getloadavg()[0]:.1f}"
        )
        keras.backend.clear_session()
    print(
        "summary: tuned/baseline examples/s "
        + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items())
        + f" (load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
