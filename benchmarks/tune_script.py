"""`tfthroughput tune --apply` on an unchanged script: do the script's own epochs get faster?

The workload is `benchmarks/tune.py`'s launch-bound one written as the plain script a user
has (a 32-64-1 MLP, batch 16, 4,096 examples as arrays, `fit` for `--epochs` epochs). In each
round the script runs twice as real subprocesses, the order alternating from round to round:
under `tfthroughput run` (the script as written, monitored) and under `tfthroughput tune
--apply` (tuned at its fit, then trained with the pick, monitored the same way). Both speeds
are the monitor's own per-epoch examples/s read back from the runs' event files, the first
epoch left out (it traces the train function); a round's figure is the ratio of the two
medians. Also printed: what `tune` chose in each round, its confirmed figure, and the direct
cost of taking the call, rebuilding the model (the builder's check build) and building one
copy, timed in-process on the README's example, which noise does not blur.

    python benchmarks/tune_script.py [--rounds 3] [--epochs 6] [--budget 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SCRIPT = """
import keras, numpy as np

rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 32)).astype("float32")
y = (x[:, :1] * 0.5).astype("float32")
model = keras.Sequential(
    [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
)
model.compile(keras.optimizers.SGD(0.01), "mse")
model.fit(x, y, batch_size=16, epochs={epochs}, verbose=0)
"""

README_MODEL = """
import keras, numpy as np

x = np.random.rand(512, 16).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential(
    [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
)
model.compile("adam", "mse")
"""


def epoch_speed(log_dir: Path) -> float:
    """The median of the monitored fit's per-epoch examples/s, the first epoch left out."""
    from tfthroughput.report.folder_events import load_folder_events

    scalars = load_folder_events(str(log_dir / "fit-1")).scalars  # the script's one fit
    speeds = [value for _, value in scalars["epoch/examples_per_second"]]
    return statistics.median(speeds[1:])


def run_cli(args: list[str], folder: Path) -> None:
    command = [sys.executable, "-m", "tfthroughput.cli", *args]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")


def one_round(folder: Path, budget: float, order: tuple[str, str]) -> dict:
    speeds, chosen = {}, None
    for side in order:
        log_dir = folder / side
        if side == "plain":
            run_cli(["run", "--log-dir", str(log_dir), "train.py"], folder)
        else:
            out = folder / "tune.json"
            args = ["--apply", "--budget", str(budget), "--json", str(out)]
            run_cli(["tune", *args, "--log-dir", str(log_dir), "train.py"], folder)
            written = json.loads(out.read_text())
            chosen = (written["chosen"], written["speedup"])
        speeds[side] = epoch_speed(log_dir)
    return {"ratio": speeds["tuned"] / speeds["plain"], **speeds, "chosen": chosen}


def rebuild_cost(repeats: int = 5) -> tuple[float, float]:
    """Seconds to take a call's model and make the builder (one check build), and to build one
    more copy, on the README's example: medians of ``repeats``."""
    from tfthroughput.tuning.script.model_rebuild import builder

    namespace: dict = {}
    exec(textwrap.dedent(README_MODEL), namespace)
    model = namespace["model"]
    model.build((None, 16))
    arguments = {"optimizer": "adam", "loss": "mse"}
    take, build = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        build_model = builder(model, arguments, model.get_weights())
        take.append(time.perf_counter() - start)
        start = time.perf_counter()
        build_model()
        build.append(time.perf_counter() - start)
    return statistics.median(take), statistics.median(build)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--budget", type=float, default=60.0)
    args = parser.parse_args()

    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(args.rounds):
            folder = Path(scratch) / f"round{number}"
            folder.mkdir()
            (folder / "train.py").write_text(textwrap.dedent(SCRIPT.format(epochs=args.epochs)))
            order = ("plain", "tuned") if number % 2 == 0 else ("tuned", "plain")
            result = one_round(folder, args.budget, order)
            rounds.append(result)
            (setup, speedup) = result["chosen"]
            knobs = {k: setup[k] for k in ("steps_per_execution", "jit_compile", "pipeline")}
            confirmed = "not confirmed" if speedup is None else f"confirmed {speedup:.2f}x"
            print(
                f"round {number + 1}: plain {result['plain']:,.0f} examples/s, tuned "
                f"{result['tuned']:,.0f} ({result['ratio']:.2f}x); chosen {knobs}, "
                f"{confirmed}; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    take, build = rebuild_cost()
    ratios = [r["ratio"] for r in rounds]
    print(
        f"tune --apply's epochs vs the plain script's: {statistics.median(ratios):.2f}x "
        f"(median of {len(ratios)} rounds, {min(ratios):.2f}-{max(ratios):.2f}); "
        f"taking the call and rebuilding (README's example): {take:.3f} s, each further "
        f"copy {build:.3f} s"
    )


if __name__ == "__main__":
    main()
