"""The demo's tune workload, also an example of ``tfthroughput tune MODULE:FUNCTION``'s
contract (``tfthroughput/cli/workload.py``)."""

from __future__ import annotations

from typing import Any


def demo_workload() -> dict[str, Any]:
    """A launch-bound workload, for the demo and as an example of the contract: a 32-64-1 MLP
    at batch 16 on 2,048 in-memory examples, whose steps are too small to keep a device busy.

    Example:
        tfthroughput tune tfthroughput.demo.tune_workload:demo_workload --budget 30
    """
    import keras
    import numpy as np

    def build_model() -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input((32,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        model.compile(keras.optimizers.SGD(0.01), "mse")
        return model

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 32)).astype("float32")
    y = (x @ rng.normal(size=(32, 1)) * 0.1).astype("float32")
    return {"build_model": build_model, "data": (x, y), "batch_size": 16}
