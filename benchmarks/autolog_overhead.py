"""Does `tfthroughput.autolog()` cost more than a `GPUMonitor` added by hand?

The same `fit` (with validation) and `predict`, in rounds; in each round once with a hand-added
`GPUMonitor` and once under `autolog()` (the patch on, no callbacks given), the order alternating
from round to round. Printed: the median of the per-round ratios (autolog / by hand) of wall
time, with the lowest and highest ratio, and the load average (the machine is shared).

Also the direct cost, which noise does not blur: the time autolog's patch spends before Keras's
own `fit` starts (binding the arguments, copying the callback list, building the monitor),
timed in isolation over many calls, against the bare `fit`'s time.

    python benchmarks/autolog_overhead.py [--rounds 7] [--epochs 2] [--examples 16000]
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfthroughput  # noqa: E402
from tfthroughput import GPUMonitor, MonitoringWarning  # noqa: E402
from tfthroughput.monitor import autologging, keras_patch  # noqa: E402


def build(examples: int):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, 64)).astype("float32")
    y = x[:, :1] * 2.0
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    return model, x, y


def one_call(model, x, y, epochs: int, callbacks) -> float:
    start = time.perf_counter()
    model.fit(
        x, y, batch_size=64, epochs=epochs, verbose=0, validation_split=0.2, callbacks=callbacks
    )
    model.predict(x, batch_size=256, verbose=0, callbacks=callbacks)
    return time.perf_counter() - start


def by_hand(model, x, y, epochs: int, folder: str) -> float:
    return one_call(model, x, y, epochs, [GPUMonitor(folder)])


def under_autolog(model, x, y, epochs: int, folder: str) -> float:
    tfthroughput.autolog(log_dir=folder)
    try:
        return one_call(model, x, y, epochs, None)
    finally:
        tfthroughput.autolog(disable=True)


def preparation_seconds(model, x, y, calls: int = 2000) -> float:
    """Seconds autolog's patch spends on one call before Keras's ``fit`` runs."""
    settings = autologging._Settings(tempfile.mkdtemp(), {})
    keras_patch._monitor_for = settings.monitor_for
    signature = inspect.signature(keras.Model.fit)
    try:
        start = time.perf_counter()
        for _ in range(calls):
            keras_patch._with_monitor("fit", signature, model, (x, y), {"callbacks": []})
        return (time.perf_counter() - start) / calls
    finally:
        keras_patch._monitor_for = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--examples", type=int, default=16_000)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", "GPU metrics are off", MonitoringWarning)
    model, x, y = build(args.examples)
    root = tempfile.mkdtemp(prefix="autolog-overhead-")
    one_call(model, x, y, 1, None)  # tracing and compilation, outside the rounds
    ratios, hand_times = [], []
    for index in range(args.rounds):
        arms = [("hand", by_hand), ("auto", under_autolog)]
        if index % 2:
            arms.reverse()
        times = {
            name: arm(model, x, y, args.epochs, os.path.join(root, f"{name}-{index}"))
            for name, arm in arms
        }
        ratios.append(times["auto"] / times["hand"])
        hand_times.append(times["hand"])
        print(f"round {index + 1}: by hand {times['hand']:.2f} s, autolog {times['auto']:.2f} s")
    bare = statistics.median(hand_times)
    prepare = preparation_seconds(model, x, y)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    median = statistics.median(ratios)
    print(f"load average: {load}")
    share = prepare / bare
    print(f"autolog's preparation of one call: {prepare * 1e6:.0f} us ({share:.1e} of the call)")
    print(
        f"autolog / by hand: {median:.3f}x wall time "
        f"[{min(ratios):.3f}-{max(ratios):.3f}] over {args.rounds} rounds"
    )


if __name__ == "__main__":
    main()
