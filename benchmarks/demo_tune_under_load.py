"""The demo's tune under load: does it keep a gain with other programs beside it?

Runs the exact ``tune`` call of ``tfthroughput demo`` (``tfthroughput/demo/run.py:tune_demo``:
the launch-bound 32-64-1 MLP at batch 16, 8 s budget) ``--runs`` times, each in a fresh
process as the demo runs it, with ``--hog`` processes that each keep one core busy started
beside it in their own session (as another program would be). Prints each run's chosen setup
and its confirmed ratio with the interval (and the confirmation's line where it did not keep
the search's pick), then how many runs kept at least ``--target``.
Run:

    .venv/bin/python benchmarks/demo_tune_under_load.py --runs 5 --hog 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_ONE_RUN = """
import json, sys, tempfile
from tfthroughput.demo.run import tune_demo
result = tune_demo(tempfile.mkdtemp())
c = result.confirmation
print(json.dumps({
    "chosen": result.chosen.changes_from(result.baseline) or "the baseline",
    "ratio": None if c is None else c.ratio,
    "low": None if c is None else c.ratio_low,
    "high": None if c is None else c.ratio_high,
    "pick": None if c is None else c.pick.changes_from(result.baseline),
    "seconds": result.seconds,
    "outcome": "" if c is None else c.outcome,
}))
"""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hog", type=int, default=1, help="busy processes beside each run")
    parser.add_argument("--target", type=float, default=1.3, help="the gain a run must keep")
    args = parser.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "3"}
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(args.hog)
    ]
    kept = 0
    try:
        for run in range(1, args.runs + 1):
            load = os.getloadavg()[0]
            with tempfile.TemporaryDirectory():
                out = subprocess.run(
                    [sys.executable, "-c", _ONE_RUN],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            found = json.loads(out.strip().splitlines()[-1])
            ratio = found["ratio"] or 1.0
            kept += ratio >= args.target
            interval = "" if found["low"] is None else f" [{found['low']:.2f}-{found['high']:.2f}]"
            print(
                f"run {run}: load {load:.2f}; chosen {found['chosen']}: {ratio:.2f}x{interval} "
                f"confirmed (search's pick {found['pick']}); search {found['seconds']:.1f} s",
                flush=True,
            )
            if found.get("outcome"):
                print(f"  {found['outcome']}", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
    print(f"{kept} of {args.runs} runs kept >= {args.target}x with {args.hog} busy process(es)")


if __name__ == "__main__":
    main()
