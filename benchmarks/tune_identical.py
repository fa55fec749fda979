"""Two identical setups compared by tune's paired rule: how often is one called "faster"?

The launch-bound workload of benchmarks/tune.py (the 32-64-1 MLP at batch 16 on a cached
dataset), the model as given built twice from the same seed, then compared `--comparisons`
times by ``engine.measure.compare`` (alternated rounds, the paired rule adding rounds until it
settles). Each line gives the median ratio with its sign-test interval and the verdict; the
medians' range is what ``engine.paired.MIN_GAIN`` must clear. Run:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/tune_identical.py [--comparisons 20] [--steps 64]

The last line is a one-line summary.
"""

from __future__ import annotations

import argparse
import os
import time

from tune import launch_bound  # noqa: E402 - the workload of benchmarks/tune.py

from tfthroughput._ratio_text import paired_words, ratio_text
from tfthroughput.tuning.engine.measure import compare
from tfthroughput.tuning.engine.paired import MIN_GAIN
from tfthroughput.tuning.training.data import training_data
from tfthroughput.tuning.training.fit_runner import FitRunner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=int, default=20, help="comparisons to run")
    parser.add_argument("--steps", type=int, default=64, help="steps per timed run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds each starts with")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    build, data, _ = launch_bound()
    training = training_data(data, None)
    common = {"steps": args.steps, "examples_per_step": 16, "seed": 0, "clock": time.perf_counter}
    sides = [FitRunner(None, build, training.feed(None, args.steps), **common) for _ in range(2)]
    for runner in sides:
        runner.start()
    medians, faster = [], 0
    for index in range(args.comparisons):
        found = compare(*sides, args.rounds)
        medians.append(found.ratio)
        faster += found.verdict == "faster"
        words = paired_words(found.rounds, found.coverage)
        figure = ratio_text(found.ratio, found.ratio_low, found.ratio_high, words)
        print(f"{index + 1:2d}: {figure}: {found.verdict}")
    for runner in sides:
        runner.close()
    print(
        f"summary: two identical setups, {args.comparisons} comparisons: faster {faster} times; "
        f"medians {min(medians):.3f}-{max(medians):.3f} (MIN_GAIN {MIN_GAIN:.0%}; "
        f"load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
