"""Fits under a strategy until the process dies: Keras's own build against tune's build from
the input's shapes, side by side.

Each arm is a child process looping as a search does: a small model built under
``OneDeviceStrategy("/cpu:0")``, fitted five times (8 steps of batch 8 from 64 rows of arrays:
the whole data), ``gc.freeze()`` around each model. ``keras`` arm: as Keras does it, a
throwaway distributed iterator at every fit's start. ``from-shapes`` arm: the model built first
by ``build_from_spec`` (``tfthroughput/tuning/training/strategy_build.py``), as tune builds its
trials'. A child
that dies (a segmentation fault on a TensorFlow thread) is restarted; fits are counted from its
progress lines. Run:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/strategy_fit_crash.py [--minutes 25]

The last line is a one-line summary: fits and crashes of each arm.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

LOOP = """
import faulthandler, gc, os, sys, time
faulthandler.enable()
import numpy as np, tensorflow as tf, keras
from tfthroughput.tuning.training.strategy_build import build_from_spec

from_shapes = sys.argv[1] == "from-shapes"
strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
x = np.ones((64, 4), "float32")
feed = {"x": x, "y": x[:, :1], "batch_size": 8}
fits, deadline = 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    gc.freeze()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    if from_shapes:
        assert build_from_spec(model, feed)
    for _ in range(5):
        model.fit(**feed, steps_per_epoch=8, epochs=1, verbose=0)
        fits += 1
        print("fits", fits, flush=True)
    gc.unfreeze()
"""
ARMS = ("keras", "from-shapes")


def run_arms(seconds: float, child_seconds: float) -> dict[str, dict[str, int]]:
    """Both arms at once, each restarted until ``seconds`` have passed."""
    totals = {arm: {"fits": 0, "crashes": 0, "runs": 0} for arm in ARMS}
    deadline = time.monotonic() + seconds
    running: dict[str, subprocess.Popen] = {}
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    while running or time.monotonic() < deadline:
        for arm in ARMS:
            if arm not in running and time.monotonic() < deadline:
                command = [sys.executable, "-c", LOOP, arm, str(child_seconds)]
                running[arm] = subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
                )
        time.sleep(1.0)
        for arm, child in list(running.items()):
            if child.poll() is None:
                continue
            out, errors = child.communicate()
            lines = out.splitlines()
            progress = [int(line.split()[1]) for line in lines if line.startswith("fits")]
            totals[arm]["fits"] += progress[-1] if progress else 0
            totals[arm]["runs"] += 1
            if child.returncode != 0:
                totals[arm]["crashes"] += 1
                print(
                    f"{arm}: exit {child.returncode} after {progress[-1] if progress else 0} "
                    f"fits, in {crash_site(errors)}",
                    flush=True,
                )
            del running[arm]
    return totals


def crash_site(errors: str) -> str:
    """The innermost Python frame faulthandler printed for the crashed thread."""
    fault = errors.split("Fatal Python error", 1)
    frames = [line.strip() for line in fault[-1].splitlines() if line.strip().startswith("File ")]
    return frames[0] if len(fault) == 2 and frames else "(no Python frame printed)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=25.0, help="how long both arms run")
    parser.add_argument("--child-seconds", type=float, default=120.0, help="one child's run")
    args = parser.parse_args()
    totals = run_arms(args.minutes * 60.0, args.child_seconds)
    print(
        "summary: "
        + "; ".join(
            f"{arm}: {t['fits']} fits, {t['crashes']} crashes in {t['runs']} processes"
            for arm, t in totals.items()
        )
    )


if __name__ == "__main__":
    main()
