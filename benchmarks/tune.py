"""tune() on three kinds of workload: baseline vs tuned examples/s in one run, and the cost of
the search itself.

Workloads (CPU, TensorFlow backend):

- launch-bound: the issue's 32-64-1 MLP at batch 16 on a cached dataset (each step is mostly
  Keras's fixed per-step cost); the same fed through a shuffle and a map, once with a seeded
  shuffle and a fixed map, once with an unseeded shuffle and noise drawn per batch (its
  confirmed gain should be the seeded one's: the loss check compares like with like). Both
  reshuffle every pass, so neither can be cached and they differ only in what is random;
- input-bound: a small model fed by a pipeline with a sequential Python step of 4 ms per batch;
- compute-bound: a 256-512-512-1 MLP at batch 512 on in-memory arrays (16 timed steps a run).

For each: `tune(...)` (its search, then its confirmation by whole `fit` epochs), then the
baseline and the chosen setup are rebuilt and timed side by side (alternated, `--repeats` rounds
of `--steps` steps, medians, each run a one-epoch `fit`, so each pays its input's iterator
start, which a many-epoch `fit` pays once), independently of tune's own measurements; and
timed as a user times their own `fit`: the model as given and the chosen setup applied to the
same call as
`tfthroughput tune --apply` applies it, 4-epoch fits alternated, epochs 2-4 by a callback.
Each workload's line gives the search's figure for its pick, the confirmed figure
(`result.speedup`), both re-timings, and what the confirmation added to the search's time.

Inference (`tune(..., mode="inference")`, `--mode inference`), on uncompiled models:

- predict launch-bound: the same 32-64-1 MLP, `predict` at its default batch 32;
- predict compute-bound: a 1024-4096-1 MLP at batch 1024 on 2,048 examples (about 8.6 GFLOP
  a batch; the batch can only double once), in float32 (`precision=False`: on a CPU with
  AVX512-BF16 the recommended bfloat16 does help it, about 2x), where nothing should help.

For each: the search and its confirmation, then the baseline and the chosen setup rebuilt and
timed by plain `model.predict(x, batch_size=...)` calls on the workload's data as tune got it
(or `--predict-examples` examples: what a batch job pays, its per-call set-up included),
alternated for `--repeats` rounds. Run:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/tune.py [--mode both] [--budget 90] [--repeats 5]
        [--hog 1]

``--hog N`` keeps N other processes spinning on a core each for the whole run.

The last line is a one-line summary with the ratios.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import keras
import numpy as np
import tensorflow as tf
from _epoch_starts import EpochStarts

from tfthroughput._ratio_text import paired_words, ratio_text
from tfthroughput.precision.policy import mixed_precision
from tfthroughput.tuning import tune
from tfthroughput.tuning._table import paired_figure
from tfthroughput.tuning.engine.measure import compare
from tfthroughput.tuning.engine.paired import paired_ratio
from tfthroughput.tuning.script.call_apply import data_changer
from tfthroughput.tuning.training.data import training_data
from tfthroughput.tuning.training.fit_runner import FitRunner
from tfthroughput.tuning.training.pipeline import fill_cache, plan, rebuilt


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


def launch_bound_mapped(random: bool):
    """The launch-bound MLP fed through a shuffle and a map, as training code is written: with
    ``random``, an unseeded shuffle and noise drawn per batch; without, a seeded shuffle and a
    fixed map (the same work per pass, replayed alike by both sides: the reference). A shuffle
    that does not reshuffle would be cached by the rebuilt pipeline, a gain the random input
    cannot have."""
    x, y = arrays(4096, 32)
    data = tf.data.Dataset.from_tensor_slices((x, y))
    if random:
        data = data.shuffle(4096).batch(16)
        data = data.map(lambda a, b: (a + tf.random.normal(tf.shape(a), stddev=0.01), b))
    else:
        data = data.shuffle(4096, seed=0).batch(16)
        data = data.map(lambda a, b: (a + 0.01, b))
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
    "launch-bound, seeded shuffle, fixed map": (lambda: launch_bound_mapped(False), 128),
    "launch-bound, unseeded shuffle, random map": (lambda: launch_bound_mapped(True), 128),
    "input-bound": (input_bound, 128),
    "compute-bound": (compute_bound, 16),
}


def predict_mlp(features: int, hidden: tuple[int, ...]) -> keras.Model:
    layers = [keras.Input((features,))]
    layers += [keras.layers.Dense(width, activation="relu") for width in hidden]
    return keras.Sequential([*layers, keras.layers.Dense(1)])  # predict needs no compile


def predict_launch_bound():
    return (lambda: predict_mlp(32, (64,))), arrays(16384, 32)[0], None


def predict_compute_bound():
    return (lambda: predict_mlp(1024, (4096,))), arrays(2048, 1024)[0], 1024


# name -> (workload, batches of the baseline's timed run in tune, examples per timed predict
# call of the side-by-side check as a fraction of --predict-examples, tune's precision)
PREDICT_WORKLOADS = {
    "predict launch-bound": (predict_launch_bound, 128, 1, None),
    "predict compute-bound float32": (predict_compute_bound, 4, 1 / 8, False),
}


def predict_side_by_side(build, x, batch_size, result, examples: int, repeats: int):
    """Plain ``model.predict`` calls over ``examples`` examples, baseline and chosen setup
    alternated: median examples/s of each and the per-round ratios."""
    x = np.concatenate([x] * -(-examples // len(x)))[:examples]
    keras.utils.set_random_seed(0)
    base = build()
    with mixed_precision(result.chosen.policy):
        keras.utils.set_random_seed(0)
        tuned = result.apply(build())
    runs = {"base": (base, {"batch_size": batch_size}), "tuned": (tuned, result.predict_kwargs)}
    for model, kwargs in runs.values():
        model.predict(x, verbose=0, **kwargs)  # traced (the last batch too) before timing
    speeds = {"base": [], "tuned": []}
    for index in range(repeats):
        for name in ("base", "tuned") if index % 2 == 0 else ("tuned", "base"):
            model, kwargs = runs[name]
            start = time.perf_counter()
            model.predict(x, verbose=0, **kwargs)
            speeds[name].append(examples / (time.perf_counter() - start))
    ratios = [t / b for t, b in zip(speeds["tuned"], speeds["base"], strict=True)]
    median = lambda values: float(np.median(values))  # noqa: E731
    return median(speeds["base"]), median(speeds["tuned"]), median(ratios), ratios


def run_inference(args, ratios: dict) -> None:
    for name, (make, steps, share, precision) in PREDICT_WORKLOADS.items():
        if args.only and args.only not in name:
            continue
        build, x, batch_size = make()
        start = time.perf_counter()
        result = tune(
            build,
            x,
            mode="inference",
            batch_size=batch_size,
            time_budget=args.budget,
            steps=steps,
            precision=precision,
        )
        search = time.perf_counter() - start
        trials = len(result.trials)
        print(f"\n=== {name}: tune(mode='inference') took {search:.1f} s ({trials} trials)")
        print(result)
        examples = int(args.predict_examples * share) if args.predict_examples else len(x)
        base, tuned, ratio, rounds = predict_side_by_side(
            build, x, batch_size, result, examples, args.repeats
        )
        ratios[name] = ratio
        print(
            f"{name}: baseline predict {base:,.0f} examples/s, tuned "
            f"({result.chosen.changes_from(result.baseline)}) {tuned:,.0f} examples/s: "
            f"{ratio:.2f}x [{min(rounds):.2f}-{max(rounds):.2f}] over {args.repeats} alternated "
            f"predict calls of {examples} examples (re-timed); {figures(result, search)}; "
            f"tune {search:.1f} s; load {os.getloadavg()[0]:.1f}"
        )
        keras.backend.clear_session()


def figures(result, seconds: float) -> str:
    """The search's figure for its pick, the confirmed one, and the confirmation's cost."""
    confirmation = result.confirmation
    if confirmation is None:
        return f"search: nothing faster (search {seconds:.1f} s)"
    pick = max(
        (t for t in result.trials if t.setup == confirmation.pick and t.status == "faster"),
        key=lambda t: t.ratio,
    )
    share = confirmation.seconds / max(seconds - confirmation.seconds, 1e-9)
    return (
        f"search's pick ({pick.label}) {paired_figure(pick)} in the search; confirmed "
        f"{paired_figure(confirmation)} for {confirmation.label} by {confirmation.work}; "
        "confirmation "
        f"{confirmation.seconds:.1f} s (+{share:.0%} on the search)"
    )


def side_by_side(build, data, batch_size, result, steps: int, repeats: int):
    """Baseline vs chosen setup, rebuilt and timed alternately: medians of examples/s."""
    training = training_data(data, batch_size)
    spe = max(result.chosen.steps_per_execution, result.baseline.steps_per_execution)
    steps = max(steps, spe) // spe * spe
    examples = training.batch_size or int(next(iter(data))[0].shape[0])
    common = {"steps": steps, "examples_per_step": examples, "seed": 0}
    base = FitRunner(
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
    tuned = FitRunner(result.chosen, build, feed, clock=time.perf_counter, warm_data=warm, **common)
    base.start()
    tuned.start()
    comparison = compare(base, tuned, repeats)
    return comparison


def user_fit_side_by_side(build, data, batch_size, result, rounds: int, epochs: int = 4):
    """As a user times their own ``fit``: the model as given, and the chosen setup applied to
    the same call as ``tfthroughput tune --apply`` applies it (``result.apply``, the call's data
    changed by ``call_apply.data_changer``), each fitted ``epochs`` epochs with Keras's
    defaults; epochs 2 on timed from one epoch's start to the next by a callback; the two fits
    alternated. The per-round ratios of median epoch times, baseline over tuned."""

    def call() -> dict:
        if isinstance(data, tuple):
            return {"x": data[0], "y": data[1], "batch_size": batch_size}
        return {"x": data, "y": None, "batch_size": batch_size}

    base_call, tuned_call = call(), call()
    change = data_changer(result)
    if change is not None:
        change(tuned_call)
    keras.utils.set_random_seed(0)
    base = build()
    with mixed_precision(result.chosen.policy):
        keras.utils.set_random_seed(0)
        tuned = result.apply(build())
    sides = {"base": (base, base_call), "tuned": (tuned, tuned_call)}
    ratios = []
    for index in range(rounds):
        epoch_seconds = {}
        for name in ("base", "tuned") if index % 2 == 0 else ("tuned", "base"):
            model, arguments = sides[name]
            clock = EpochStarts()
            model.fit(**arguments, epochs=epochs, verbose=0, callbacks=[clock])
            epoch_seconds[name] = float(np.median(np.diff(clock.starts[1:])))
        ratios.append(epoch_seconds["base"] / epoch_seconds["tuned"])
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=90.0, help="tune's time budget, s")
    parser.add_argument("--repeats", type=int, default=5, help="alternated A/B rounds")
    parser.add_argument("--steps", type=int, default=256, help="steps per timed run")
    parser.add_argument(
        "--mode", choices=("training", "inference", "both"), default="both", help="what to tune"
    )
    parser.add_argument(
        "--predict-examples",
        type=int,
        default=0,
        help="examples per re-timed predict call (default: the data as tune got it)",
    )
    parser.add_argument("--only", default=None, help="run the workloads whose name has this")
    parser.add_argument(
        "--hog",
        type=int,
        default=0,
        help="start this many processes that each keep one core busy for the whole run, "
        "as another program on a shared machine would",
    )
    args = parser.parse_args()
    # Another program: its own session, so the scheduler shares the cores between it and this
    # process as it would between two programs a user started, not thread by thread.
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(args.hog)
    ]
    try:
        run(args)
    finally:
        for hog in hogs:
            hog.kill()


def run(args: argparse.Namespace) -> None:
    print(f"load average before: {os.getloadavg()}" + (f"; {args.hog} hog(s)" if args.hog else ""))
    ratios = {}
    if args.mode in ("inference", "both"):
        run_inference(args, ratios)
    for name, (make, steps) in WORKLOADS.items() if args.mode != "inference" else ():
        if args.only and args.only not in name:
            continue
        build, data, batch_size = make()
        start = time.perf_counter()
        result = tune(build, data, batch_size=batch_size, time_budget=args.budget, steps=steps)
        search = time.perf_counter() - start
        print(f"\n=== {name}: tune() took {search:.1f} s ({len(result.trials)} trials)")
        print(result)
        timed = args.steps if steps >= args.steps else steps
        comparison = side_by_side(build, data, batch_size, result, timed, args.repeats)
        ratios[name] = comparison.ratio
        user = paired_ratio(user_fit_side_by_side(build, data, batch_size, result, args.repeats))
        user_text = ratio_text(
            user.median, user.low, user.high, paired_words(args.repeats, user.coverage)
        )
        print(
            f"{name}: baseline {comparison.baseline_examples_per_second:,.0f} examples/s, "
            f"tuned ({result.chosen.changes_from(result.baseline)}) "
            f"{comparison.examples_per_second:,.0f} examples/s: {paired_figure(comparison)} "
            f"(re-timed); user's fit {user_text}; {figures(result, search)}; tune {search:.1f} s; "
            f"load {os.getloadavg()[0]:.1f}"
        )
        keras.backend.clear_session()
    print(
        "summary: tuned/baseline examples/s "
        + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items())
        + f" (load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
