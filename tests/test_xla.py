"""XLA compile kwargs, the scoped auto-clustering switch, and the jit_compile decorator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.precision.xla import (
    JitChange,
    XlaCompilationError,
    _cpu_clustering_flag_set,
    is_xla_failure,
    jit_compile,
    xla_auto_clustering,
    xla_compile_kwargs,
)


@pytest.fixture(autouse=True)
def auto_clustering_off():
    """Each test starts with auto-clustering off and may not leak a setting."""
    before = tf.config.optimizer.get_jit()
    tf.config.optimizer.set_jit(False)
    yield
    tf.config.optimizer.set_jit(before or False)


# --- compile kwargs ----------------------------------------------------------------------------


def test_compile_kwargs():
    assert xla_compile_kwargs() == {"jit_compile": True}
    assert xla_compile_kwargs(False) == {"jit_compile": False}
    # On this CPU-only machine the recommendation leaves XLA off, like Keras's "auto".
    if not tf.config.list_physical_devices("GPU"):
        assert xla_compile_kwargs("auto") == {"jit_compile": False}
    with pytest.raises(ValueError, match="Received: enabled='yes'"):
        xla_compile_kwargs("yes")
    with pytest.raises(TypeError, match=r"Received: enabled=1 \(of type int\)"):
        xla_compile_kwargs(1)
    with pytest.raises(TypeError, match="Received: enabled=None"):
        xla_compile_kwargs(None)


def test_tiny_model_trains_under_xla():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", **xla_compile_kwargs())
    assert model.jit_compile is True
    losses = model.fit(x, y, batch_size=32, epochs=5, verbose=0).history["loss"]
    assert losses[-1] < losses[0] / 2


def test_tiny_model_trains_under_xla_and_mixed_bfloat16():
    from tfthroughput.precision.policy import mixed_precision

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    with mixed_precision("mixed_bfloat16"):
        model = keras.Sequential(
            [
                keras.Input((8,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(1, dtype="float32"),
            ]
        )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=True)
    losses = model.fit(x, y, batch_size=32, epochs=5, verbose=0).history["loss"]
    assert losses[-1] < losses[0] / 2


# --- auto-clustering switch --------------------------------------------------------------------

# Without a GPU, turning auto-clustering on warns that it needs TF_XLA_FLAGS (tested below);
# the scope tests are about setting and restoring, so that warning is expected there.
_NO_CPU_CLUSTERING = "ignore:XLA auto-clustering is on:UserWarning"


@pytest.mark.filterwarnings(_NO_CPU_CLUSTERING)
def test_scope_turns_on_and_restores():
    with xla_auto_clustering() as change:
        assert tf.config.optimizer.get_jit() == "autoclustering"
        assert (change.previous, change.current, change.changed) == (False, True, True)
    assert tf.config.optimizer.get_jit() == ""


def test_scope_restores_after_an_exception():
    tf.config.optimizer.set_jit("autoclustering")
    with pytest.raises(KeyError):
        with xla_auto_clustering(False):
            assert tf.config.optimizer.get_jit() == ""
            raise KeyError("boom")
    assert tf.config.optimizer.get_jit() == "autoclustering"


@pytest.mark.filterwarnings(_NO_CPU_CLUSTERING)
def test_one_shot_reports_and_restores():
    change = xla_auto_clustering(True)
    assert isinstance(change, JitChange)
    assert str(change) == "XLA auto-clustering: off -> on"
    assert str(xla_auto_clustering(True)) == "XLA auto-clustering unchanged: on"
    change.restore()
    assert tf.config.optimizer.get_jit() == ""


def test_auto_clustering_validates():
    with pytest.raises(TypeError, match="Received: enabled='autoclustering'"):
        xla_auto_clustering("autoclustering")
    assert tf.config.optimizer.get_jit() == ""


# Runs in a fresh process because TensorFlow reads TF_XLA_FLAGS once, when it starts. Prints
# which ops TensorFlow really executed for a function traced inside the scope and one traced
# after it, from the run metadata of the executed (post-optimisation) graphs.
_EXECUTED_OPS = """
import json, warnings
import tensorflow as tf
from tensorflow.python.eager import context
from tfthroughput.precision import xla_auto_clustering

def executed_ops(function, x):
    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        function(x)
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    return sorted({node.op for graph in metadata.function_graphs
                   for partition in graph.partition_graphs for node in partition.node})

def step(x):
    return tf.nn.relu(tf.matmul(x, x)) * 2.0 + 1.0

x = tf.ones((4, 4))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with xla_auto_clustering():
        inside = executed_ops(tf.function(step), x)
outside = executed_ops(tf.function(step), x)
print(json.dumps({"inside": inside, "outside": outside,
                  "warnings": [str(w.message) for w in caught]}))
"""


def _executed_ops(xla_flags: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    if xla_flags is not None:
        env["TF_XLA_FLAGS"] = xla_flags
    result = subprocess.run(
        [sys.executable, "-c", _EXECUTED_OPS], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def _matmul_kernels(ops: list[str]) -> set[str]:
    """The matmul kernels among ``ops``, whatever the CPU: ``MatMul``, or oneDNN's rewrite of it
    (``_MklMatMul``, ``_MklNativeMatMul``, a fused ``..._FusedMatMul``), which TensorFlow picks
    by CPU (AVX-512, BF16) and ``TF_ENABLE_ONEDNN_OPTS``."""
    return {op for op in ops if op.endswith("MatMul")}


def test_function_traced_in_the_scope_really_runs_through_xla():
    ops = _executed_ops("--tf_xla_cpu_global_jit")
    # XLA compiled a cluster and ran it: the ops TensorFlow executed are XLA's launch ops,
    # and no matmul kernel of TensorFlow's own.
    assert {"_XlaCompile", "_XlaRun"} <= set(ops["inside"]), ops
    assert not _matmul_kernels(ops["inside"]), ops
    # Traced after the scope: the plain kernels again, no XLA.
    assert _matmul_kernels(ops["outside"]), ops
    assert not {"_XlaCompile", "_XlaRun"} & set(ops["outside"]), ops
    assert ops["warnings"] == []


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="clusters GPU ops")
def test_without_a_gpu_or_the_cpu_flag_nothing_is_compiled_and_it_warns():
    ops = _executed_ops(None)
    # What TensorFlow does: auto-clustering on, yet no cluster compiled on the CPU.
    assert _matmul_kernels(ops["inside"]), ops
    assert "_XlaCompile" not in ops["inside"]
    # What the switch says about it.
    assert len(ops["warnings"]) == 1
    assert "TF_XLA_FLAGS=--tf_xla_cpu_global_jit" in ops["warnings"][0]
    assert "nothing will be compiled" in ops["warnings"][0]


def test_turning_it_off_never_warns(monkeypatch):
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not xla_auto_clustering(False).changed


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("", False),
        ("--tf_xla_cpu_global_jit", True),
        ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit=true", True),
        ("--tf_xla_cpu_global_jit=false", False),
        ("--tf_xla_cpu_global_jit=0", False),
        ("--tf_xla_cpu_global_jit_other", False),
    ],
)
def test_cpu_clustering_flag_is_read_from_tf_xla_flags(flags, expected):
    assert _cpu_clustering_flag_set(flags) is expected


# --- jit_compile decorator ---------------------------------------------------------------------


def test_jit_compile_compiles_a_supported_function():
    @jit_compile
    def affine(x):
        return x * 3.0 + 1.0

    np.testing.assert_array_equal(affine(tf.constant([1.0, 2.0])).numpy(), [4.0, 7.0])
    assert affine.uses_xla is True
    assert affine.__name__ == "affine"
    # The XLA kernel really ran: the concrete function carries XLA's must-compile attribute.
    concrete = affine._function.get_concrete_function(tf.TensorSpec([2], tf.float32))
    assert concrete.function_def.attr["_XlaMustCompile"].b is True


def test_jit_compile_decorates_methods():
    class Scaler:
        def __init__(self, factor):
            self.factor = factor

        @jit_compile
        def __call__(self, x):
            return x * self.factor

    np.testing.assert_array_equal(Scaler(2.0)(tf.constant([1.0])).numpy(), [2.0])
    np.testing.assert_array_equal(Scaler(5.0)(tf.constant([1.0])).numpy(), [5.0])


def _host_doubling(x):
    # tf.numpy_function runs Python, which XLA cannot compile.
    return tf.numpy_function(lambda a: a * 2, [x], tf.float32)


def test_xla_failure_becomes_a_clear_error():
    decorated = jit_compile(_host_doubling)
    with pytest.raises(
        XlaCompilationError, match=r"XLA could not compile _host_doubling\(\)"
    ) as info:
        decorated(tf.constant([1.0]))
    assert "PyFunc" in str(info.value)
    assert "jit_compile(fallback=True)" in str(info.value)
    assert isinstance(info.value.__cause__, tf.errors.InvalidArgumentError)


def test_fallback_warns_once_then_runs_without_xla():
    decorated = jit_compile(fallback=True)(_host_doubling)
    with pytest.warns(RuntimeWarning, match="running it as a plain tf.function"):
        result = decorated(tf.constant([1.0, 2.0]))
    np.testing.assert_array_equal(result.numpy(), [2.0, 4.0])
    assert decorated.uses_xla is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(decorated(tf.constant([3.0])).numpy(), [6.0])


def test_other_errors_pass_through():
    @jit_compile(fallback=True)
    def broken(x):
        raise ZeroDivisionError("not XLA's fault")

    # tf.function reports errors raised while tracing as a StagingError; it passes unchanged.
    with pytest.raises(Exception, match="not XLA's fault") as info:
        broken(tf.constant(1.0))
    assert not isinstance(info.value, XlaCompilationError)
    assert broken.uses_xla is True
    assert not is_xla_failure(tf.errors.InvalidArgumentError(None, None, "Incompatible shapes"))


def test_jit_compile_rejects_its_own_flag():
    with pytest.raises(TypeError, match="Received: jit_compile=False"):
        jit_compile(lambda x: x, jit_compile=False)
