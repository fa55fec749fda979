"""find_batch_size(): the search on a fake oracle, a real small run, and every guard."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfthroughput import find_batch_size
from tfthroughput.diagnosis import BatchSizeSearch, BatchSizeTrial


class FitsUpTo:
    """Fake trial: batch sizes up to ``limit`` fit, at ``batch_size`` examples/s."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls: list[int] = []

    def __call__(self, batch_size: int) -> float | None:
        self.calls.append(batch_size)
        return float(batch_size) if batch_size <= self.limit else None


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 64, 100, 1000, 4095])
def test_oracle_search_finds_the_limit_in_logarithmic_trials(limit):
    oracle = FitsUpTo(limit)
    result = find_batch_size(trial=oracle, max_batch_size=4096)

    assert result.largest_fitting == limit
    assert result.fastest == limit
    assert result.complete and not result.reached_max
    assert len(result.trials) == len(oracle.calls)
    assert len(oracle.calls) <= 2 * math.ceil(math.log2(limit)) + 2
    assert len(set(oracle.calls)) == len(oracle.calls)  # no size tried twice
    assert all(t.fits == (t.batch_size <= limit) for t in result.trials)


def _documented_bound(min_batch_size, largest):
    """The trial count find_batch_size's docstring states for a limit below max_batch_size."""
    doublings = math.floor(math.log2(largest / min_batch_size)) + 1
    return 2 * doublings + math.ceil(math.log2(min_batch_size))


@pytest.mark.parametrize("min_batch_size", [1, 2, 8, 48])
def test_the_documented_trial_bound_holds_and_is_reached(min_batch_size, nothing_frozen):
    reached = 0
    for limit in range(min_batch_size, 4096):
        oracle = FitsUpTo(limit)
        find_batch_size(trial=oracle, min_batch_size=min_batch_size, max_batch_size=4096)
        bound = _documented_bound(min_batch_size, limit)
        assert len(oracle.calls) <= bound, (limit, oracle.calls)
        reached += len(oracle.calls) == bound
        # The bound over every limit, max_batch_size included.
        assert len(oracle.calls) <= 2 * math.floor(math.log2(4096 / min_batch_size)) + 2 + (
            math.ceil(math.log2(min_batch_size))
        )
    assert reached > 0
    doc = find_batch_size.__doc__
    assert "``2 * d + ceil(log2(min_batch_size))``" in doc
    assert "(14 for ``min_batch_size=1`` and ``F=100``," in doc
    assert "11 for ``min_batch_size=8`` and ``F=100``)" in doc
    assert (_documented_bound(1, 100), _documented_bound(8, 100)) == (14, 11)


def test_search_order_doubles_then_bisects():
    oracle = FitsUpTo(100)
    result = find_batch_size(trial=oracle, max_batch_size=4096)
    assert oracle.calls == [1, 2, 4, 8, 16, 32, 64, 128, 96, 112, 104, 100, 102, 101]
    assert result.curve == tuple((b, float(b)) for b in sorted(oracle.calls) if b <= 100)
    assert result.fastest_examples_per_second == 100.0


def test_trials_collect_only_what_the_search_made_and_the_freeze_is_lifted_after(
    nothing_frozen,
):
    import gc

    frozen_in_trials = []

    def trial(batch_size: int) -> float | None:
        frozen_in_trials.append(gc.get_freeze_count() > 0)
        return float(batch_size) if batch_size <= 8 else None

    find_batch_size(trial=trial, max_batch_size=64)
    assert frozen_in_trials and all(frozen_in_trials)
    assert gc.get_freeze_count() == 0


def test_cap_and_min_batch_size():
    oracle = FitsUpTo(10_000)
    result = find_batch_size(trial=oracle, min_batch_size=48, max_batch_size=300)
    assert oracle.calls == [48, 96, 192, 300]
    assert result.largest_fitting == 300
    assert result.reached_max and result.complete
    assert "(= max_batch_size: the real limit may be higher)" in str(result)


def test_fastest_is_the_peak_of_the_curve_not_the_largest():
    speeds = {1: 10.0, 2: 30.0, 4: 50.0, 8: 45.0, 16: None}
    calls = []

    def trial(batch_size):
        calls.append(batch_size)
        return speeds.get(batch_size)  # sizes not listed do not fit

    result = find_batch_size(trial=trial, max_batch_size=64)
    assert calls == [1, 2, 4, 8, 16, 12, 10, 9]
    assert result.largest_fitting == 8
    assert result.fastest == 4
    assert result.fastest_examples_per_second == 50.0


def test_resource_exhausted_counts_as_not_fitting():
    def trial(batch_size):
        if batch_size > 5:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
        return 1.0

    result = find_batch_size(trial=trial, max_batch_size=64)
    assert result.largest_fitting == 5
    failed = [t for t in result.trials if not t.fits]
    assert failed[0] == BatchSizeTrial(8, False, None, "OOM when allocating tensor")
    assert "does not fit  OOM when allocating tensor" in str(result)


def test_max_trials_bounds_the_search():
    oracle = FitsUpTo(1000)
    result = find_batch_size(trial=oracle, max_trials=4, max_batch_size=4096)
    assert oracle.calls == [1, 2, 4, 8]
    assert result.largest_fitting == 8
    assert not result.complete
    assert "search stopped at max_trials" in str(result)


def test_smallest_batch_not_fitting_is_a_clear_error():
    with pytest.raises(
        RuntimeError,
        match=r"Even the smallest batch size does not fit: "
        r"min_batch_size=16 \(trial returned None\)",
    ):
        find_batch_size(trial=FitsUpTo(8), min_batch_size=16)


def test_trial_must_return_a_speed():
    with pytest.raises(TypeError, match="A trial must return a non-negative number"):
        find_batch_size(trial=lambda b: "fast")


def test_result_is_frozen():
    result = find_batch_size(trial=FitsUpTo(4), max_batch_size=8)
    assert isinstance(result, BatchSizeSearch)
    with pytest.raises(AttributeError):
        result.fastest = 1


# ----------------------------------------------------------------------------- real runs


def _build() -> keras.Model:
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


def _examples() -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.random((256, 16), dtype=np.float32)
    y = rng.random((256, 1), dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y))


def test_real_run_on_an_unbatched_dataset_clears_the_session():
    result = find_batch_size(_build, _examples(), min_batch_size=8, max_batch_size=32, steps=2)

    assert [t.batch_size for t in result.trials] == [8, 16, 32]
    assert all(t.fits and t.examples_per_second > 0 for t in result.trials)
    assert result.largest_fitting == 32 and result.reached_max
    assert result.fastest in (8, 16, 32)
    # The Keras session was cleared after the last trial: layer names start over.
    assert keras.layers.Dense(1).name == "dense"


def test_real_run_with_a_dataset_function_and_a_memory_ceiling():
    seen = []

    def make(batch_size):
        seen.append(batch_size)
        return _examples().batch(batch_size)

    # One MiB of RSS: nothing fits, so the error names the ceiling.
    with pytest.raises(RuntimeError, match=r"min_batch_size=4 \(process RSS peaked at"):
        find_batch_size(_build, make, min_batch_size=4, steps=1, memory_limit_mib=1)
    assert seen == [4]
    # A generous ceiling changes nothing.
    result = find_batch_size(
        _build, make, min_batch_size=4, max_batch_size=8, steps=1, memory_limit_mib=2**20
    )
    assert result.largest_fitting == 8
    # Each trial's own memory is reported, in the result and its table.
    assert all(t.memory_mib > 0 for t in result.trials)
    assert "examples/s  added MiB" in str(result)


MiB = 2**20


# oneDNN's rewrites (on by default where the CPU has AVX-512 or BF16) keep per-process caches
# of their own, so a process's memory at one batch size depends on what it ran before: the line
# measured in fresh processes does not hold for a search's trials (with TF_ENABLE_ONEDNN_OPTS=1
# here: 2.4 MiB per example alone, and 384 examples adding 614 MiB in the search against about
# 1,000 MiB alone). The test is about the search, not oneDNN: every process runs TensorFlow's own
# kernels, whatever the CPU.
_SAME_KERNELS_ON_EVERY_CPU = {"TF_ENABLE_ONEDNN_OPTS": "0"}


def _linear_memory(*args: str) -> subprocess.Popen:
    script = Path(__file__).with_name("linear_memory.py")
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, **_SAME_KERNELS_ON_EVERY_CPU},
    )


def _result(run: subprocess.Popen, given: str = "") -> dict:
    out, _ = run.communicate(given.encode(), timeout=300)
    assert run.returncode == 0
    return json.loads(out.decode().strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the truth")
def test_memory_ceiling_finds_the_true_limit_of_a_linear_model():
    import linear_memory

    # The search runs in a fresh process too, started now: it loads TensorFlow meanwhile.
    search = _linear_memory("search")
    # The truth: two sizes, each alone in a fresh process, give the line memory(batch).
    small, large = 128, 512
    alone = {
        row["batch_size"]: row["memory_bytes"]
        for row in map(_result, [_linear_memory(str(small)), _linear_memory(str(large))])
    }
    slope = (alone[large] - alone[small]) / (large - small)
    intercept = alone[small] - slope * small
    # At least the model's own 2 MiB per example (an activation and its gradient, 2 x 262144
    # float32 values), less 10 % of measurement noise; at most half as much again (2.0 MiB
    # measured with TensorFlow's own kernels; the search is checked against this line).
    own_bytes = 2 * linear_memory.WIDTH * 4
    assert 0.9 * own_bytes < slope < 1.5 * own_bytes, slope / MiB
    # A ceiling whose true limit is 336 examples, halfway between the two sizes the search
    # ends on, 96 MiB (14 %) from each: the peak of one size varies by up to about 8 % from
    # run to run (what the training step keeps alive at once depends on thread timing).
    true_limit = 336
    budget = int(intercept + slope * (true_limit + 0.5))

    result = _result(search, f"{budget}\n")

    trials = result["trials"]
    assert [size for size, _, _ in trials] == [96, 192, 384, 288], result["text"]
    # Within one binary-search step of the true limit: 288 fits, 384 does not.
    assert result["largest_fitting"] == 288, result["text"]
    # Each trial measured its own memory as it is alone, whatever earlier trials left behind
    # (the first also pays the process's one-time costs).
    for size, memory_bytes, fits in trials:
        expected = intercept + slope * size
        assert abs(memory_bytes - expected) < 0.1 * expected + 16 * MiB, (size, expected)
        assert fits == (size <= true_limit), (size, fits)


# ------------------------------------------------------------------------------ guards


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (
            dict(min_batch_size=0),
            ValueError,
            "`min_batch_size` must be a positive int. Received: min_batch_size=0",
        ),
        (
            dict(max_batch_size=2.5),
            TypeError,
            "`max_batch_size` must be a positive int. Received: max_batch_size=2.5",
        ),
        (dict(steps=True), TypeError, "`steps` must be a positive int. Received: steps=True"),
        (
            dict(max_trials=-3),
            ValueError,
            "`max_trials` must be a positive int. Received: max_trials=-3",
        ),
        (
            dict(min_batch_size=64, max_batch_size=32),
            ValueError,
            "`min_batch_size` must not exceed",
        ),
        (
            dict(memory_limit_mib=0),
            ValueError,
            "`memory_limit_mib` must be a positive int or None",
        ),
        (
            dict(memory_limit_mib=1.5e3),
            TypeError,
            "`memory_limit_mib` must be a positive int or None",
        ),
        (dict(clock="now"), TypeError, "`clock` must be callable"),
    ],
)
def test_argument_guards(kwargs, error, match):
    with pytest.raises(error, match=match):
        find_batch_size(trial=FitsUpTo(4), **kwargs)


def test_model_and_data_guards():
    with pytest.raises(TypeError, match="`trial` must be a callable"):
        find_batch_size(trial=3)
    with pytest.raises(ValueError, match="`build_model` and `data` are required unless `trial`"):
        find_batch_size(_build)
    with pytest.raises(TypeError, match="`build_model` must be a callable"):
        find_batch_size("model", _examples())
    with pytest.raises(TypeError, match="`data` must be a callable .* Received: data=\\[1, 2\\]"):
        find_batch_size(_build, [1, 2])
    with pytest.raises(
        TypeError,
        match=r"`data` must return a tf.data.Dataset or a keras.utils.PyDataset .* data\(1\)",
    ):
        find_batch_size(_build, lambda b: [b])
    with pytest.raises(TypeError, match="`build_model` must return a compiled keras.Model"):
        find_batch_size(lambda: "model", _examples())
    uncompiled = lambda: keras.Sequential([keras.Input((16,)), keras.layers.Dense(1)])  # noqa: E731
    with pytest.raises(ValueError, match=r"call model\.compile\(\.\.\.\) inside it"):
        find_batch_size(uncompiled, _examples())
