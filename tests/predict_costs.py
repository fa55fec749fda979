"""Inference trials of known costs for the search (``tune(..., mode="inference")``'s workload on
fake runners): seconds per batch from a formula on a fake clock, so every ratio, latency and
verdict the search reaches is exact, and no model is built."""

from __future__ import annotations

import math

import numpy as np

from tfthroughput.tuning.engine.search import Search
from tfthroughput.tuning.inference.data import inference_data
from tfthroughput.tuning.inference.predict_runner import latency_samples_due, percentile
from tfthroughput.tuning.inference.workload import InferenceSettings, InferenceWorkload
from tfthroughput.tuning.setup import TuneSetup


class KnownCost:
    """Seconds per batch: ``launch / steps_per_execution + per_example * batch`` (per_example
    halved under XLA); one batch's latency: ``launch + per_example * batch``. Outputs: the
    baseline's, plus ``drift(setup)``."""

    def __init__(self, launch, per_example, drift=lambda setup: 0.0):
        self.launch, self.per_example, self.drift = launch, per_example, drift

    def runner(self, setup, build_model, data, *, steps, warmup_steps, seed, clock):
        return FakePredictRunner(self, setup, data, steps)

    def per_example_of(self, setup):
        return self.per_example * (0.5 if setup.jit_compile else 1.0)


class FakePredictRunner:
    def __init__(self, cost, setup, data, steps):
        self._cost, self.setup, self._data, self.steps = cost, setup, data, steps
        self.latencies, self.notes = [], []
        self.warmup_seconds, self.memory_mib, self.outputs = 0.5, None, None
        self.solo_speed = None

    def rewarm(self):
        pass

    def start(self, *, user_model_errors=False):
        if self.setup is None:
            self.setup = TuneSetup(1, False, "float32", batch_size=self._data.batch_size)
        self.examples_per_step = self.setup.batch_size
        self.outputs = np.linspace(-1.0, 1.0, 64) + self._cost.drift(self.setup)

    def _per_example(self):
        return self._cost.per_example_of(self.setup)

    def run(self):
        per_batch = self._cost.launch / self.setup.steps_per_execution
        return self.steps * (per_batch + self._per_example() * self.setup.batch_size)

    def sample_latency(self, count):
        self.latencies += [self._cost.launch + self._per_example() * self.setup.batch_size] * count

    def latency_ms(self, fraction):
        return 1000.0 * percentile(self.latencies, fraction) if self.latencies else None

    @property
    def reference(self):
        return self.outputs

    def before_round(self):
        self.sample_latency(latency_samples_due(len(self.latencies)))

    def figures(self):
        return {
            "warmup_seconds": self.warmup_seconds,
            "memory_mib": self.memory_mib,
            "reason": "",
            "latency_p50_ms": self.latency_ms(0.5),
            "latency_p95_ms": self.latency_ms(0.95),
        }

    def set_steps(self, steps):
        self.steps = steps

    def whole_call(self, feed):
        """A whole call on ``feed``'s arrays: ``launch`` per batch, ``per_example`` each."""
        examples = len(feed["x"])
        batches = math.ceil(examples / feed["batch_size"])
        return batches * self._cost.launch + examples * self._per_example(), examples

    def close(self):
        pass


def workload(cost, *, examples=1024, limit=None, policy=None, xla=True, tolerance=0.02, **more):
    data = inference_data(np.zeros((examples, 4), "float32"), 32)
    settings = InferenceSettings(
        **{
            "steps": 128,
            "rounds": 3,
            "time_budget": 1e9,
            "output_tolerance": tolerance,
            "seed": 0,
            "max_steps_per_execution": 1024,
            "max_batch_latency_ms": limit,
            "policy": policy,
            "try_xla": xla,
            "notes": (),
            **more,
        }
    )
    return InferenceWorkload(None, data, settings, lambda: 0.0, runner=cost.runner)


def search(cost, **options):
    made = workload(cost, **options)
    return Search(made, made.settings, lambda: 0.0).run()
