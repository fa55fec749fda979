"""Search quality: tune's confirmed pick against the exhaustive grid of the same knobs.

For each workload of ``benchmarks/tune.py`` (launch-, input- and compute-bound training; launch-
and compute-bound ``predict``), ``tune(...)`` runs (its search and its confirmation), then every
setup of the grid is timed against the baseline with one protocol: ``--rounds`` alternated
rounds of whole pieces of work (``fit`` epochs of the data; ``predict`` calls on the data, set-up
included), median ratio. The grid:

- training: ``steps_per_execution`` (1, 2, 4, ... ``--max-spe``, at most the epoch) x XLA
  (off, on) x the dtype policy (float32 and ``recommend_precision``'s, where it differs) x the
  pipeline (as given, rebuilt as tune rebuilds it);
- inference: the batch (the given one doubled, up to 128x or the examples) x XLA x
  ``steps_per_execution`` (1, 2, 4) x the policy.

The grid's best of many noisy ratios is biased upwards (the highest of 12-96 draws), so the
grid's ``--leaders`` best setups and tune's pick are then timed again, all in the same
``--retime-rounds`` rounds against one baseline, their order rotated. The best is the highest
ratio to the baseline there; pick/best is the pick's speed over the best's, round by round
(both ran in each round, so the round's drift cancels), its median and range. A second copy of
the first leader runs in the same rounds, and its speed over the leader's, round by round, is
how far one setup moves against itself: the resolution of a "within 5 %" verdict. The grid
checks neither the loss nor the outputs (tune does; a grid point it rejected for that can be
the grid's best). One line per workload: the pick's ratio over the best re-timed, the copy's,
and tune's time (its search and its confirmation apart) over the grid's first pass, which runs
with garbage collections that scan only what it made, as tune's search does (``gc.freeze``),
so a grid setup's start and a trial's cost alike. The last line is a one-line summary. Run:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/tune_grid.py [--mode both] [--budget 90]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from math import nan

import keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tune import PREDICT_WORKLOADS, WORKLOADS  # noqa: E402 - benchmarks/tune.py's workloads

from tfthroughput.diagnosis.trial_memory import collections_of_new_objects_only  # noqa: E402
from tfthroughput.precision import recommend_precision  # noqa: E402
from tfthroughput.tuning import TuneSetup, tune  # noqa: E402
from tfthroughput.tuning.engine.confirmation import WholeRuns  # noqa: E402
from tfthroughput.tuning.engine.measure import compare, compare_together  # noqa: E402
from tfthroughput.tuning.engine.trial_model import TrialFailed  # noqa: E402
from tfthroughput.tuning.inference.data import inference_data  # noqa: E402
from tfthroughput.tuning.inference.predict_runner import PredictRunner  # noqa: E402
from tfthroughput.tuning.training.data import training_data  # noqa: E402
from tfthroughput.tuning.training.fit_runner import FitRunner  # noqa: E402
from tfthroughput.tuning.training.pipeline import plan  # noqa: E402
from tfthroughput.tuning.training.whole_epochs import epoch_feed, epoch_plan  # noqa: E402

_ALL = 1e15  # no cap on a piece of work: whole epochs, whole calls


def given_setup(build, batch_size) -> TuneSetup:
    keras.utils.set_random_seed(0)
    model = build()
    spe = int(getattr(model, "steps_per_execution", 1) or 1)
    return TuneSetup(
        spe, bool(model.jit_compile), keras.config.dtype_policy().name, batch_size=batch_size
    )


def policies(base: TuneSetup) -> list[str]:
    recommended = recommend_precision().policy
    return [base.policy] + ([recommended] if recommended != base.policy else [])


def train_starter(build, data, pipe, base: TuneSetup):
    """Starts a runner timed by whole fit epochs for a setup."""
    step = data.batch_size or int(keras.tree.flatten(data.first_batch()[0])[0].shape[0])

    def start(setup: TuneSetup) -> WholeRuns:
        epoch = epoch_plan(data, setup.batch_size, step, None, _ALL, setup.steps_per_execution)
        feed, warm = epoch_feed(data, setup, epoch, pipe, None)
        told = feed.pop("steps_per_epoch")
        runner = FitRunner(
            None if setup == base else setup,
            build,
            feed,
            steps=told,
            examples_per_step=step,
            seed=0,
            clock=time.perf_counter,
            warm_data=warm,
            batch_size=data.batch_size,
        )
        runner.start()
        return WholeRuns(runner, epoch.examples)

    return start


def train_grid(data, base: TuneSetup, max_spe: int, epoch: int) -> list[TuneSetup]:
    values = [v for v in (2**i for i in range(12)) if v <= min(max_spe, epoch)]
    pipelines = (False, True) if data.rebuildable else (False,)
    grid = []
    for spe, jit, policy, pipeline in itertools.product(
        values, (False, True), policies(base), pipelines
    ):
        grid.append(TuneSetup(spe, jit, policy, pipeline=pipeline, batch_size=base.batch_size))
    return grid


def predict_starter(build, data, base: TuneSetup):
    """Starts a runner timed by whole predict calls on the data for a setup."""

    def start(setup: TuneSetup) -> WholeRuns:
        spe = setup.steps_per_execution
        runner = PredictRunner(
            None if setup == base else setup,
            build,
            data,
            steps=2 * spe,
            warmup_steps=2 * spe,
            seed=0,
            clock=time.perf_counter,
        )
        runner.start()
        feed, _ = data.whole_feed(runner.setup.batch_size, _ALL)
        _, examples = runner.whole_call(feed)  # untimed: tracing, the last batch's shape
        return WholeRuns(runner, examples, run=lambda: runner.whole_call(feed)[0])

    return start


def predict_grid(data, base: TuneSetup) -> list[TuneSetup]:
    sizes = [base.batch_size * 2**i for i in range(8)]
    sizes = [s for s in sizes if data.examples is None or s <= data.examples]
    grid = []
    for size, jit, spe, policy in itertools.product(
        sizes, (False, True), (1, 2, 4), policies(base)
    ):
        grid.append(TuneSetup(spe, jit, policy, batch_size=size))
    return grid


def time_grid(start, base: TuneSetup, grid: list[TuneSetup], rounds: int) -> dict:
    """Every setup against the baseline in alternated rounds: setup -> median ratio (or None)."""
    ratios, baseline = {}, start(base)
    try:
        for setup in dict.fromkeys(grid):
            runner = None
            try:
                runner = start(setup)
                ratios[setup] = compare(baseline, runner, rounds).ratio
            except TrialFailed:
                ratios[setup] = None
            finally:
                if runner is not None:
                    runner.close()
                keras.backend.clear_session()
    finally:
        baseline.close()
    return ratios


def retime(start, base: TuneSetup, setups: list[TuneSetup], rounds: int) -> tuple[dict, tuple]:
    """The grid's leaders and tune's pick timed again, all in the same rounds against one
    baseline (their order rotated): setup -> its :class:`Comparison` with the baseline, and a
    second copy of the first leader's (or ``None``). The grid's best of many noisy ratios is
    biased upwards; timing the leaders together again is what compares them, and the copy
    shows how far one setup moves against itself: the resolution a "within 5 %" verdict has
    on this machine."""
    leader = next((setup for setup in setups[1:] if setup != base), None)
    sides = [(setup, False) for setup in dict.fromkeys(setups) if setup != base]
    sides += [(leader, True)] if leader is not None else []
    baseline, runners = start(base), []
    try:
        for setup, is_copy in sides:
            try:
                runners.append((setup, is_copy, start(setup)))
            except TrialFailed:
                keras.backend.clear_session()
        found = compare_together(baseline, [runner for *_, runner in runners], rounds)
    finally:
        for runner in [baseline, *(runner for *_, runner in runners)]:
            runner.close()
        keras.backend.clear_session()
    again, copy = {}, None
    for (setup, is_copy, _), comparison in zip(runners, found, strict=True):
        if is_copy:
            copy = comparison
        else:
            again[setup] = comparison
    return again, (again.get(leader), copy)


def round_by_round(one, other) -> tuple[float, float, float]:
    """``one``'s speed over ``other``'s, each round's pair timed in the same round: the
    median, lowest and highest. A ratio of two ratios to the baseline would carry the
    baseline's runs twice; the pair's own rounds carry only the two setups' scatter. ``None``
    stands for the baseline: its speeds are the comparison's baseline speeds."""
    sides = [s for s in (one, other) if s is not None]
    if not sides:
        return 1.0, 1.0, 1.0
    base = sides[0].baseline_speeds
    ones = one.speeds if one is not None else base
    others = other.speeds if other is not None else base
    ratios = [a / b for a, b in zip(ones, others, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def report(name, result, tune_seconds: float, grid: dict, again: dict, pair: tuple, seconds: float):
    """One line: tune's pick against the grid's best as re-timed together (round by round),
    the leader's copy against the leader, and the costs: tune's search and confirmation
    apart, and the grid's."""
    timed = {s: r for s, r in grid.items() if r is not None}
    first_best = max(timed, key=timed.get)
    ratio = lambda setup: again[setup].ratio if setup in again else 1.0  # noqa: E731
    best = max([result.baseline, *again], key=ratio)
    quality, low, high = round_by_round(again.get(result.chosen), again.get(best))
    copy, copy_low, copy_high = round_by_round(pair[1], pair[0]) if pair[1] else (nan,) * 3
    confirmation = result.confirmation.seconds if result.confirmation else 0.0
    changes = lambda setup: setup.changes_from(result.baseline) or "the baseline"  # noqa: E731
    print(
        f"{name}: tune's pick ({changes(result.chosen)}) {ratio(result.chosen):.2f}x re-timed "
        f"(tune said {result.speedup:.2f}x); the best re-timed ({changes(best)}) "
        f"{ratio(best):.2f}x; the grid's first pass: {changes(first_best)} "
        f"{timed[first_best]:.2f}x of {len(timed)} setups: pick/best {quality:.2f} "
        f"[{low:.2f}-{high:.2f}] round by round; the first leader's copy / the leader "
        f"{copy:.2f} [{copy_low:.2f}-{copy_high:.2f}]; tune {tune_seconds:.0f} s (search "
        f"{result.seconds:.0f} s, confirmation {confirmation:.0f} s), grid {seconds:.0f} s "
        f"({tune_seconds / seconds:.2f} of it, confirmation alone "
        f"{confirmation / seconds:.2f}); load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return quality


def grid_and_retime(args, start, base: TuneSetup, grid: list[TuneSetup], chosen: TuneSetup):
    """The grid's first pass, then its ``--leaders`` best and tune's pick re-timed together;
    both ratio maps and the seconds the grid took (the re-timing is the benchmark's, not the
    grid's, so it is not counted)."""
    began = time.perf_counter()
    with collections_of_new_objects_only():  # as in tune's search: the same cost per start
        ratios = time_grid(start, base, grid, args.rounds)
    seconds = time.perf_counter() - began
    ranked = sorted((s for s, r in ratios.items() if r is not None), key=ratios.get, reverse=True)
    again, pair = retime(start, base, [chosen, *ranked[: args.leaders]], args.retime_rounds)
    return ratios, again, pair, seconds


def run_training(args, qualities: dict) -> None:
    for name, (make, steps) in WORKLOADS.items():
        if args.only and args.only not in name:
            continue
        build, raw, batch_size = make()
        began = time.perf_counter()
        result = tune(build, raw, batch_size=batch_size, time_budget=args.budget, steps=steps)
        tune_seconds = time.perf_counter() - began
        data = training_data(raw, batch_size)
        base = given_setup(build, data.batch_size)
        epoch = epoch_plan(data, base.batch_size, 1, None, _ALL, 1).steps
        grid = train_grid(data, base, args.max_spe, epoch)
        start = train_starter(build, data, plan(data), base)
        timed = grid_and_retime(args, start, base, grid, result.chosen)
        qualities[name] = report(name, result, tune_seconds, *timed)


def run_inference(args, qualities: dict) -> None:
    for name, (make, steps, _, precision) in PREDICT_WORKLOADS.items():
        if args.only and args.only not in name:
            continue
        build, x, batch_size = make()
        began = time.perf_counter()
        result = tune(
            build,
            x,
            mode="inference",
            batch_size=batch_size,
            time_budget=args.budget,
            steps=steps,
            precision=precision,
        )
        tune_seconds = time.perf_counter() - began
        data = inference_data(x, batch_size)
        base = given_setup(build, data.batch_size)
        grid = predict_grid(data, base)
        if precision is False:  # as tune was told: float32 only
            grid = [s for s in grid if s.policy == base.policy]
        start = predict_starter(build, data, base)
        timed = grid_and_retime(args, start, base, grid, result.chosen)
        qualities[name] = report(name, result, tune_seconds, *timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=90.0, help="tune's time budget, s")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds per grid point")
    parser.add_argument("--leaders", type=int, default=3, help="grid setups re-timed with tune's")
    parser.add_argument("--retime-rounds", type=int, default=7, help="rounds of the re-timing")
    parser.add_argument("--max-spe", type=int, default=128, help="largest steps_per_execution")
    parser.add_argument("--mode", choices=("training", "inference", "both"), default="both")
    parser.add_argument("--only", default=None, help="run the workloads whose name has this")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    qualities: dict[str, float] = {}
    if args.mode in ("training", "both"):
        run_training(args, qualities)
    if args.mode in ("inference", "both"):
        run_inference(args, qualities)
    print(
        "summary: tune's pick / the grid's best, by whole epochs or predict calls: "
        + ", ".join(f"{name} {quality:.2f}" for name, quality in qualities.items())
        + f" (load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
