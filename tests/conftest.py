"""Suite-wide fixtures: thread-leak check, garbage collections per test, the `gpu` marker and
the files' order."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time

import pytest

# Keep TensorFlow quiet and deterministic enough for exact assertions on CPU.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _gpu_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


# The files that take longest, longest first (their tests' seconds summed in a `pytest -n 3`
# run with junit XML on 2 cores: 95, 82, 76, 52, 49, 48, 35, 35, 34, 34, 30, 29, 29, 25, 25,
# 25, 22, 21, 21, 20 s). xdist hands whole files to its workers in collection order
# (`--no-loadscope-reorder`), so these go first and the last files handed out are short ones:
# in its own order (files with more tests first) the backend re-runs and four 8-10 s
# single-test files came last, and one worker waited on the others' tail. Ahead of them, the
# fits under a strategy in this process, on a fresh worker: TensorFlow's crash when Keras
# drops a distributed iterator it just made (docs/tuning.md, "Under a strategy") comes in a
# process that has run many fits before, and killed that file's worker in 2 of 5 runs of the
# suite where it came twelfth.
LONGEST_FIRST = (
    "test_tune_strategy.py",
    "test_patterns.py",
    "test_cli.py",
    "test_tuner.py",
    "test_tune_replay.py",
    "test_cli_tune_script.py",
    "test_readme_examples.py",
    "test_monitor_backends.py",
    "test_service_cluster.py",
    "test_batch_size.py",
    "test_tune_paired.py",
    "test_custom_train_step.py",
    "test_diagnosis.py",
    "test_autotuning.py",
    "test_monitor_nvml.py",
    "test_cli_run.py",
    "test_tune_backends.py",
    "test_py_dataset_tools.py",
    "test_tune_inference.py",
    "test_tune_garbage.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files keep order
    if _gpu_present():
        return
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU with a loaded driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def no_global_tensorflow_seed_left_behind():
    """Clear TensorFlow's global seed after each test that set it (`keras.utils.set_random_seed`).

    A global seed gives every later unseeded op a derived seed, which changes what later tests
    see (a lint of an "unseeded" shuffle, for one). Only where TensorFlow is already imported:
    some tests run with it blocked.
    """
    yield
    tensorflow = sys.modules.get("tensorflow")
    if tensorflow is not None and hasattr(tensorflow, "random"):
        tensorflow.random.set_seed(None)


@pytest.fixture(autouse=True)
def collections_scan_this_tests_objects():
    """Freeze what earlier tests left (``gc.freeze``), so this test's garbage collections scan
    only the objects it makes.

    A worker's heap only grows: TensorFlow registers the gradient of every ``custom_gradient``
    it traces in graph mode in a global registry, which keeps that whole ``FuncGraph`` alive,
    so every fit of such a model leaves thousands of objects behind. Each full collection
    (Keras's ``clear_session``, ``tune``'s, Python's own) then scans them all again, and does
    so more slowly test after test. The garbage frozen with them is never freed: some memory,
    as CONTRIBUTING's suite figures say. A test of what the package freezes itself asks for
    ``nothing_frozen``.
    """
    gc.freeze()


@pytest.fixture
def nothing_frozen():
    """Nothing in the permanent generation, as in a program that never froze anything: for the
    tests of the package's own ``gc.freeze`` (which leaves a program's own freeze alone), and
    for a test that runs thousands of searches (each asks ``gc.get_freeze_count()``, which
    walks the whole permanent generation)."""
    gc.unfreeze()
    gc.collect()
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def cpu_counters(monkeypatch):
    """A machine where this process keeps every core busy and no other program runs, as far
    as the CPU share ``diagnose`` reads goes (the other xdist worker would otherwise count as
    another program). A test sets ``own_cores`` and ``other_cores`` for the load it needs."""
    from fakes import FakeCpuCounters

    from tfthroughput.hardware import cpu_share

    counters = FakeCpuCounters(own_cores=float(cpu_share.schedulable_cores()))
    # The meter's clock too, so each reading's three values share one instant.
    monkeypatch.setattr(cpu_share, "wall_seconds", counters.clock)
    monkeypatch.setattr(cpu_share, "own_cpu_seconds", counters.own)
    monkeypatch.setattr(cpu_share, "machine_busy_seconds", counters.machine)
    return counters


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail any test that leaves a thread running that it started."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 2.0
    leaked = []
    while time.monotonic() < deadline:
        leaked = [
            t
            for t in threading.enumerate()
            # A _DummyThread is a thread TensorFlow started in C++ (a tf.data pool thread that
            # ran a py_function): not the test's to stop, and it lives as long as the pool.
            if t not in before and t.is_alive() and not isinstance(t, threading._DummyThread)
        ]
        if not leaked:
            return
        time.sleep(0.05)
    pytest.fail(f"test leaked threads: {[t.name for t in leaked]}")


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory):
    """Folder holding the fake `libnvidia-ml.so.1`, compiled once per test session.

    Use it with `fake_nvml.run_python_with_fake_nvml(code, fake_nvml_dir, env=...)`; skips the
    test when no C compiler is available.
    """
    from fake_nvml import build_fake_nvml

    return build_fake_nvml(tmp_path_factory.mktemp("fake_nvml"))
