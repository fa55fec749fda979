"""benchmarks/service_scaling.py: its workloads are what its README figures say they are."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest

from tfthroughput.data.description import describe_pipeline
from tfthroughput.data.service_cluster import LocalDataService

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "service_scaling.py"


@pytest.fixture(scope="module")
def benchmark():
    spec = importlib.util.spec_from_file_location("service_scaling", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_latency_bound_source_waits_5_ms_per_element_one_after_another(benchmark):
    iterator = iter(benchmark.latency_bound_source())
    next(iterator)
    start = time.perf_counter()
    elements = [next(iterator).numpy() for _ in range(20)]
    assert time.perf_counter() - start >= 20 * 0.005  # a lower bound: sleeps do not shrink
    np.testing.assert_array_equal(elements[0], np.full(64, 1.0, np.float32))


def test_both_workloads_run_on_the_service_in_whole_batches(benchmark):
    with LocalDataService(workers=1) as service:
        for case in ("latency", "cpu"):
            local = benchmark.pipeline(case, None, "parallel_epochs")
            served = benchmark.pipeline(case, service.address, "parallel_epochs")
            assert describe_pipeline(served).transformations[-3:] == (
                "batch",
                "distribute",
                "prefetch",
            )
            assert served.element_spec == local.element_spec
            assert benchmark.examples_per_second(served, batches=2) > 0
            batch = next(iter(served))
            assert batch.shape == (benchmark.BATCH_SIZE, 64 if case == "latency" else 128)
