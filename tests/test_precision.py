"""Precision recommendation, the scoped dtype policy, and the mixed-precision guards."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest

from tfthroughput.precision.policy import (
    DeviceDescription,
    PolicyChange,
    _read_cpu_flags,
    check_mixed_precision_outputs,
    describe_devices,
    loss_scale_optimizer,
    mixed_precision,
    recommend_precision,
    with_gradient_accumulation,
)

GTX_1080 = DeviceDescription("GPU", "NVIDIA GeForce GTX 1080", (6, 1))
T4 = DeviceDescription("GPU", "Tesla T4", (7, 5))
A100 = DeviceDescription("GPU", "NVIDIA A100-SXM4-40GB", (8, 0))
H100 = DeviceDescription("GPU", "NVIDIA H100 80GB HBM3", (9, 0))
CPU_BF16 = DeviceDescription("CPU", "Xeon", cpu_flags={"sse4_2", "avx512f", "avx512_bf16"})
CPU_AMX = DeviceDescription("CPU", "Xeon", cpu_flags={"avx512f", "amx_bf16", "amx_tile"})
CPU_PLAIN = DeviceDescription("CPU", "Core i7", cpu_flags={"sse4_2", "avx2", "fma"})
CPU_UNKNOWN = DeviceDescription("CPU")


@pytest.fixture(autouse=True)
def float32_policy():
    """Each test starts under float32 and may not leak a policy to the next."""
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy(before)


# --- recommend_precision -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "policy", "loss_scaling", "reason_part"),
    [
        (GTX_1080, "float32", False, "compute capability 6.1 (< 7.0) has no Tensor Cores"),
        (T4, "mixed_float16", True, "compute capability 7.5 (7.x, Volta/Turing)"),
        (A100, "mixed_bfloat16", False, "compute capability 8.0 (>= 8.0, Ampere or newer)"),
        (H100, "mixed_bfloat16", False, "compute capability 9.0 (>= 8.0, Ampere or newer)"),
    ],
)
def test_gpu_recommendations(gpu, policy, loss_scaling, reason_part):
    rec = recommend_precision([gpu, CPU_PLAIN])
    assert rec.policy == policy
    assert rec.loss_scaling is loss_scaling
    assert rec.xla is True
    assert reason_part in rec.policy_reason
    assert "XLA fuses element-wise ops" in rec.xla_reason
    assert rec.devices == (gpu, CPU_PLAIN)


def test_loss_scaling_reasons_name_the_dtype():
    assert "underflow to zero" in recommend_precision([T4]).loss_scaling_reason
    assert "float32's exponent range" in recommend_precision([A100]).loss_scaling_reason
    assert recommend_precision([GTX_1080]).loss_scaling_reason == (
        "float32 gradients do not underflow"
    )


def test_oldest_gpu_decides():
    rec = recommend_precision([H100, T4])
    assert (rec.policy, rec.loss_scaling) == ("mixed_float16", True)
    assert "7.5" in rec.policy_reason


def test_gpu_without_compute_capability_stays_float32():
    rec = recommend_precision([DeviceDescription("GPU", "AMD Instinct MI250")])
    assert rec.policy == "float32"
    assert "compute capability of a GPU is unknown" in rec.policy_reason


@pytest.mark.parametrize(
    ("cpu", "policy", "reason_part"),
    [
        (CPU_BF16, "mixed_bfloat16", "native bfloat16 instructions (avx512_bf16)"),
        (CPU_AMX, "mixed_bfloat16", "native bfloat16 instructions (amx_bf16)"),
        (CPU_PLAIN, "float32", "without bfloat16 instructions"),
        (CPU_UNKNOWN, "float32", "features are unknown"),
    ],
)
def test_cpu_only_recommendations(cpu, policy, reason_part):
    rec = recommend_precision([cpu])
    assert (rec.policy, rec.loss_scaling, rec.xla) == (policy, False, False)
    assert reason_part in rec.policy_reason
    assert "jit_compile='auto' leaves it off" in rec.xla_reason


def test_tpu_recommendation():
    rec = recommend_precision([DeviceDescription("TPU", "TPU:0"), CPU_PLAIN])
    assert (rec.policy, rec.loss_scaling, rec.xla) == ("mixed_bfloat16", False, True)


def test_recommendation_str_is_a_short_report():
    text = str(recommend_precision([T4]))
    assert text.splitlines()[0].startswith("precision policy: mixed_float16 (compute capability")
    assert text.splitlines()[1].startswith("loss scaling: yes (")
    assert text.splitlines()[2].startswith("XLA: yes (")


def test_recommend_rejects_other_objects():
    with pytest.raises(TypeError, match="Received: devices containing 'GPU'"):
        recommend_precision(["GPU"])


def test_device_description_validates_and_normalises():
    with pytest.raises(ValueError, match="Received: kind='gpu'"):
        DeviceDescription("gpu")
    with pytest.raises(TypeError, match=r"Received: compute_capability=8\.0"):
        DeviceDescription("GPU", compute_capability=8.0)
    cpu = DeviceDescription("CPU", cpu_flags=["AVX512_BF16"])
    assert cpu.cpu_flags == frozenset({"avx512_bf16"})
    assert cpu.supports_bfloat16
    assert not A100.supports_bfloat16
    assert str(A100) == "GPU NVIDIA A100-SXM4-40GB (compute capability 8.0)"


def test_read_cpu_flags_x86_and_arm(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu avx512f avx512_bf16\n\n"
        "processor\t: 1\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu\n"
    )
    assert _read_cpu_flags(str(x86)) == (
        "Intel(R) Xeon(R)",
        frozenset({"fpu", "avx512f", "avx512_bf16"}),
    )
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU part\t: 0xd40\n")
    name, flags = _read_cpu_flags(str(arm))
    assert name == ""
    assert DeviceDescription("CPU", cpu_flags=flags).supports_bfloat16
    assert _read_cpu_flags(str(tmp_path / "missing")) == ("", frozenset())


def test_describe_devices_sees_this_cpu():
    devices = describe_devices()
    assert devices[-1].kind == "CPU"
    assert devices[-1].cpu_flags == _read_cpu_flags()[1]
    # The real machine's recommendation is one of the documented outcomes.
    assert recommend_precision().policy in ("float32", "mixed_float16", "mixed_bfloat16")


# --- mixed_precision ---------------------------------------------------------------------------


def test_scope_sets_and_restores_the_exact_policy_object():
    before = keras.config.dtype_policy()
    with mixed_precision("mixed_bfloat16") as change:
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
        assert (change.previous, change.current, change.changed) == (
            "float32",
            "mixed_bfloat16",
            True,
        )
        assert change.recommendation is None
    assert keras.config.dtype_policy() is before


def test_scope_restores_after_an_exception():
    before = keras.config.dtype_policy()
    with pytest.raises(ZeroDivisionError):
        with mixed_precision("mixed_float16"):
            assert keras.config.dtype_policy().name == "mixed_float16"
            1 / 0  # noqa: B018
    assert keras.config.dtype_policy() is before


def test_nested_scopes_unwind_in_order():
    with mixed_precision("mixed_float16"):
        outer = keras.config.dtype_policy()
        with mixed_precision("mixed_bfloat16"):
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
        assert keras.config.dtype_policy() is outer
    assert keras.config.dtype_policy().name == "float32"


def test_one_shot_sets_reports_and_can_restore():
    before = keras.config.dtype_policy()
    change = mixed_precision("mixed_bfloat16")
    assert isinstance(change, PolicyChange)
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    assert str(change) == "dtype policy: float32 -> mixed_bfloat16"
    change.restore()
    assert keras.config.dtype_policy() is before
    assert str(mixed_precision("float32")) == "dtype policy unchanged: float32"


def test_auto_follows_the_recommendation_for_given_devices():
    with mixed_precision("auto", devices=[T4]) as change:
        assert keras.config.dtype_policy().name == "mixed_float16"
        assert change.recommendation.policy == "mixed_float16"
    with mixed_precision(devices=[CPU_PLAIN]) as change:
        assert change.current == "float32"
        assert not change.changed


def test_accepts_a_dtype_policy_object():
    policy = keras.DTypePolicy("mixed_bfloat16")
    with mixed_precision(policy):
        assert keras.config.dtype_policy() is policy


def test_mixed_precision_validates_its_arguments():
    with pytest.raises(ValueError, match="Received: policy='mixed_float8'"):
        mixed_precision("mixed_float8")
    with pytest.raises(TypeError, match="Received: policy=16"):
        mixed_precision(16)
    with pytest.raises(ValueError, match="only used with policy='auto'"):
        mixed_precision("float32", devices=[T4])
    assert keras.config.dtype_policy().name == "float32"


def _regression_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    return x, y


def _tiny_model():
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )


def test_tiny_model_trains_under_mixed_bfloat16():
    keras.utils.set_random_seed(0)
    x, y = _regression_data()
    with mixed_precision("mixed_bfloat16"):
        model = _tiny_model()
    assert model.layers[0].compute_dtype == "bfloat16"
    assert model.layers[0].kernel.dtype == "float32"
    assert check_mixed_precision_outputs(model) == ()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    losses = model.fit(x, y, batch_size=32, epochs=5, verbose=0).history["loss"]
    assert losses[-1] < losses[0] / 2


# --- guards and helpers ------------------------------------------------------------------------


def test_low_precision_output_warns_with_the_fix():
    with mixed_precision("mixed_bfloat16"):
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(3, activation="softmax", name="probs")]
        )
    with pytest.warns(UserWarning, match=r"'probs' \(bfloat16\).*dtype='float32'"):
        assert check_mixed_precision_outputs(model) == ("probs",)
    with pytest.raises(ValueError, match=r"'probs' \(bfloat16\)"):
        check_mixed_precision_outputs(model, strict=True)


def test_functional_model_with_several_outputs():
    with mixed_precision("mixed_float16"):
        inputs = keras.Input((4,))
        hidden = keras.layers.Dense(8)(inputs)
        logits = keras.layers.Dense(3, name="logits")(hidden)
        value = keras.layers.Dense(1, dtype="float32", name="value")(hidden)
        model = keras.Model(inputs, [logits, value])
    with pytest.warns(UserWarning, match=r"'logits' \(float16\)"):
        assert check_mixed_precision_outputs(model) == ("logits",)


def test_float32_model_passes_silently():
    model = _tiny_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_mixed_precision_outputs(model, strict=True) == ()


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.out = keras.layers.Dense(2, name="head")

    def call(self, x):
        return self.out(x)


def test_subclassed_model_is_checked_by_its_last_layer():
    with mixed_precision("mixed_bfloat16"):
        model = _Subclassed()
    with pytest.raises(ValueError, match="must be built"):
        check_mixed_precision_outputs(model)
    model(np.zeros((1, 4), "float32"))
    with pytest.warns(UserWarning, match=r"'head' \(bfloat16\)"):
        assert check_mixed_precision_outputs(model) == ("head",)


def test_loss_scale_optimizer_wraps_only_under_float16():
    sgd = keras.optimizers.SGD(0.1)
    assert loss_scale_optimizer(sgd) is sgd
    with mixed_precision("mixed_bfloat16"):
        assert loss_scale_optimizer(sgd) is sgd
    with mixed_precision("mixed_float16"):
        wrapped = loss_scale_optimizer(sgd)
        assert isinstance(wrapped, keras.optimizers.LossScaleOptimizer)
        assert wrapped.inner_optimizer is sgd
        assert loss_scale_optimizer(wrapped) is wrapped
    assert isinstance(
        loss_scale_optimizer("adam", policy="mixed_float16"),
        keras.optimizers.LossScaleOptimizer,
    )
    with pytest.raises(TypeError, match="Received: policy=16"):
        loss_scale_optimizer(sgd, policy=16)


def test_loss_scaled_custom_loop_step_reduces_the_loss():
    keras.utils.set_random_seed(0)
    x, y = _regression_data()
    with mixed_precision("mixed_float16"):
        model = _tiny_model()
        optimizer = loss_scale_optimizer(keras.optimizers.SGD(0.05))
    import tensorflow as tf

    def loss_value():
        return float(keras.losses.mean_squared_error(y[:, 0], model(x)[:, 0]).numpy().mean())

    first = loss_value()
    for _ in range(20):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.mean_squared_error(y, model(x)))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
    assert loss_value() < first / 2


def test_gradient_accumulation_updates_every_n_batches():
    x, y = _regression_data()
    optimizer = with_gradient_accumulation(keras.optimizers.SGD(0.01, momentum=0.5), steps=4)
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert optimizer.gradient_accumulation_steps == 4
    assert optimizer.momentum == 0.5
    model = _tiny_model()
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)  # 8 batches
    assert int(optimizer.iterations.numpy()) == 2
    assert with_gradient_accumulation("adam", 1).gradient_accumulation_steps is None


def test_gradient_accumulation_inside_a_loss_scale_optimizer():
    wrapped = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=128.0)
    result = with_gradient_accumulation(wrapped, 2)
    assert isinstance(result, keras.optimizers.LossScaleOptimizer)
    assert result.inner_optimizer.gradient_accumulation_steps == 2
    assert result.initial_scale == 128.0


def test_gradient_accumulation_guards():
    with pytest.raises(ValueError, match="Received: steps=0"):
        with_gradient_accumulation("sgd", 0)
    with pytest.raises(TypeError, match="Received: steps=2.0"):
        with_gradient_accumulation("sgd", 2.0)
    built = keras.optimizers.SGD()
    built.build([keras.Variable(np.zeros(2, "float32"))])
    with pytest.raises(ValueError, match="must not be built yet"):
        with_gradient_accumulation(built, 2)
