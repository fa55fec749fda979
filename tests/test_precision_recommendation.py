"""recommend_precision's rules, the device descriptions they read, and their Keras-free import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfthroughput.precision.precision_recommendation import (
    DeviceDescription,
    describe_devices,
    read_cpu_flags,
    recommend_precision,
)

GTX_1080 = DeviceDescription("GPU", "NVIDIA GeForce GTX 1080", (6, 1))
T4 = DeviceDescription("GPU", "Tesla T4", (7, 5))
A100 = DeviceDescription("GPU", "NVIDIA A100-SXM4-40GB", (8, 0))
H100 = DeviceDescription("GPU", "NVIDIA H100 80GB HBM3", (9, 0))
CPU_BF16 = DeviceDescription("CPU", "Xeon", cpu_flags={"sse4_2", "avx512f", "avx512_bf16"})
CPU_AMX = DeviceDescription("CPU", "Xeon", cpu_flags={"avx512f", "amx_bf16", "amx_tile"})
CPU_PLAIN = DeviceDescription("CPU", "Core i7", cpu_flags={"sse4_2", "avx2", "fma"})
CPU_UNKNOWN = DeviceDescription("CPU")


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
    with pytest.raises(TypeError, match="Received: kind=0"):
        DeviceDescription(0)
    with pytest.raises(TypeError, match="Received: name=None"):
        DeviceDescription("GPU", None)
    with pytest.raises(TypeError, match="Received: cpu_flags='avx2 fma'"):
        DeviceDescription("CPU", cpu_flags="avx2 fma")
    with pytest.raises(TypeError, match=r"Received: cpu_flags=\[1\]"):
        DeviceDescription("CPU", cpu_flags=[1])
    with pytest.raises(TypeError, match="Received: cpu_flags=5"):
        DeviceDescription("CPU", cpu_flags=5)
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
    assert read_cpu_flags(str(x86)) == (
        "Intel(R) Xeon(R)",
        frozenset({"fpu", "avx512f", "avx512_bf16"}),
    )
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU part\t: 0xd40\n")
    name, flags = read_cpu_flags(str(arm))
    assert name == ""
    assert DeviceDescription("CPU", cpu_flags=flags).supports_bfloat16
    assert read_cpu_flags(str(tmp_path / "missing")) == ("", frozenset())


def test_describe_devices_sees_this_cpu():
    devices = describe_devices()
    assert devices[-1].kind == "CPU"
    assert devices[-1].cpu_flags == read_cpu_flags()[1]
    # The real machine's recommendation is one of the documented outcomes.
    assert recommend_precision().policy in ("float32", "mixed_float16", "mixed_bfloat16")


def test_rules_import_and_decide_with_tensorflow_and_keras_blocked():
    code = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras"):
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, Block())
from tfthroughput.precision.precision_recommendation import DeviceDescription, recommend_precision

print(recommend_precision([DeviceDescription("GPU", "T4", (7, 5))]).policy)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["mixed_float16", "[]"]
