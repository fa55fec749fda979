"""Which precision and XLA setting suit the hardware: devices in, a reasoned decision out.

Pure rules: nothing here imports Keras, and TensorFlow only inside :func:`describe_devices`, so a
recommendation for hand-described hardware can be made anywhere. Setting the policy lives in
:mod:`tfthroughput.precision.policy`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# Policy names `recommend_precision` can return.
FLOAT32 = "float32"
MIXED_FLOAT16 = "mixed_float16"
MIXED_BFLOAT16 = "mixed_bfloat16"

# float16 Tensor Cores arrived with Volta (7.0); bfloat16 ones with Ampere (8.0).
_FLOAT16_MIN_CC = (7, 0)
_BFLOAT16_MIN_CC = (8, 0)

# CPU feature flags (Linux /proc/cpuinfo spelling) that give native bfloat16 matrix maths, which
# oneDNN (TensorFlow's CPU kernels) uses for bfloat16 matmuls and convolutions.
_CPU_BF16_FLAGS = (
    "amx_bf16",  # x86 AMX (Sapphire Rapids and newer)
    "avx512_bf16",  # x86 AVX512-BF16 (Cooper Lake, Zen 4 and newer)
    "bf16",  # Arm FEAT_BF16 (Neoverse V1/N2, Graviton 3 and newer), "Features" line
)

_DEVICE_KINDS = ("CPU", "GPU", "TPU")


@dataclass(frozen=True)
class DeviceDescription:
    """One device as :func:`recommend_precision` sees it.

    Build these by hand to ask what would be recommended on other hardware; read the real ones
    with :func:`describe_devices`.

    Attributes:
        kind: ``"GPU"``, ``"CPU"`` or ``"TPU"``.
        name: Human-readable name, e.g. ``"NVIDIA A100-SXM4-40GB"``; may be empty.
        compute_capability: For NVIDIA GPUs, ``(major, minor)``, e.g. ``(8, 0)``; ``None`` when
            unknown or not applicable.
        cpu_flags: For CPUs, the feature flags (lower case, e.g. ``"avx512_bf16"``). Empty when
            unknown.
    """

    kind: str
    name: str = ""
    compute_capability: tuple[int, int] | None = None
    cpu_flags: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str):
            raise TypeError(f"`kind` must be one of {_DEVICE_KINDS}. Received: kind={self.kind!r}")
        if self.kind not in _DEVICE_KINDS:
            raise ValueError(f"`kind` must be one of {_DEVICE_KINDS}. Received: kind={self.kind!r}")
        if not isinstance(self.name, str):
            raise TypeError(f"`name` must be a string. Received: name={self.name!r}")
        cc = self.compute_capability
        if cc is not None and (
            not isinstance(cc, tuple) or len(cc) != 2 or not all(isinstance(v, int) for v in cc)
        ):
            raise TypeError(
                "`compute_capability` must be a (major, minor) tuple of ints or None. "
                f"Received: compute_capability={cc!r}"
            )
        # A string is iterable too, but would be read as one flag per character.
        is_collection = isinstance(self.cpu_flags, Iterable) and not isinstance(self.cpu_flags, str)
        flags = tuple(self.cpu_flags) if is_collection else ()
        if not is_collection or not all(isinstance(flag, str) for flag in flags):
            raise TypeError(
                "`cpu_flags` must be a collection of flag names. "
                f"Received: cpu_flags={self.cpu_flags!r}"
            )
        # Accept any iterable of flags but store an immutable, normalised set.
        object.__setattr__(self, "cpu_flags", frozenset(flag.lower() for flag in flags))

    @property
    def supports_bfloat16(self) -> bool:
        """Whether this CPU has native bfloat16 instructions (``False`` for other kinds)."""
        return self.kind == "CPU" and any(flag in self.cpu_flags for flag in _CPU_BF16_FLAGS)

    def __str__(self) -> str:
        text = f"{self.kind} {self.name}".strip()
        if self.compute_capability is not None:
            text += f" (compute capability {_cc(self.compute_capability)})"
        return text


@dataclass(frozen=True)
class PrecisionRecommendation:
    """What :func:`recommend_precision` decided, and why.

    Attributes:
        policy: Keras dtype policy name: ``"mixed_float16"``, ``"mixed_bfloat16"`` or
            ``"float32"``.
        loss_scaling: Whether the loss must be scaled (only ``mixed_float16``). ``model.fit``
            does it by itself; custom loops should use :func:`loss_scale_optimizer`.
        xla: Whether compiling with XLA (``jit_compile=True``) is advisable.
        policy_reason: Why this policy.
        loss_scaling_reason: Why loss scaling is or is not needed.
        xla_reason: Why XLA is or is not advisable.
        devices: The devices the decision was based on.
    """

    policy: str
    loss_scaling: bool
    xla: bool
    policy_reason: str
    loss_scaling_reason: str
    xla_reason: str
    devices: tuple[DeviceDescription, ...] = ()

    def __str__(self) -> str:
        return "\n".join(
            [
                f"precision policy: {self.policy} ({self.policy_reason})",
                f"loss scaling: {'yes' if self.loss_scaling else 'no'} "
                f"({self.loss_scaling_reason})",
                f"XLA: {'yes' if self.xla else 'no'} ({self.xla_reason})",
            ]
        )


def _cc(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def read_cpu_flags(path: str = "/proc/cpuinfo") -> tuple[str, frozenset[str]]:
    """CPU model name and feature flags from /proc/cpuinfo; empty where unavailable."""
    name, flags = "", set()
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            for line in file:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("flags", "features") and not flags:
                    flags.update(value.split())
                elif key == "model name" and not name:
                    name = value.strip()
                if flags and name:
                    break
    except OSError:
        pass  # not Linux: flags stay unknown, and the recommendation says so
    return name, frozenset(flags)


def describe_devices() -> tuple[DeviceDescription, ...]:
    """Describe the devices TensorFlow sees, for :func:`recommend_precision`.

    GPU compute capabilities come from ``tf.config.experimental.get_device_details``; CPU
    feature flags from ``/proc/cpuinfo`` (Linux; empty elsewhere). Listing physical devices does
    not initialise the GPUs, so :func:`tfthroughput.configure_gpus` can still be called after.

    Returns:
        One :class:`DeviceDescription` per physical TPU and GPU, then one for the host CPU.
    """
    from tfthroughput._optional import import_tensorflow

    tf = import_tensorflow("tfthroughput.precision.describe_devices")
    devices: list[DeviceDescription] = []
    for device in tf.config.list_physical_devices("TPU"):
        devices.append(DeviceDescription("TPU", device.name))
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        cc = details.get("compute_capability")
        devices.append(
            DeviceDescription(
                "GPU",
                details.get("device_name", device.name),
                tuple(int(v) for v in cc) if cc else None,
            )
        )
    name, flags = read_cpu_flags()
    devices.append(DeviceDescription("CPU", name, cpu_flags=flags))
    return tuple(devices)


def recommend_precision(
    devices: Iterable[DeviceDescription] | None = None,
) -> PrecisionRecommendation:
    """Recommend a dtype policy, loss scaling and XLA for the hardware.

    The rules, first match wins:

    * a TPU: ``mixed_bfloat16``, no loss scaling, XLA (TPUs always run XLA);
    * GPUs (the oldest one decides, since a policy is global): compute capability 8.0+
      (Ampere, Hopper, ...): ``mixed_bfloat16``, no loss scaling (bfloat16 has float32's
      range); 7.x (Volta, Turing): ``mixed_float16`` with loss scaling (no bfloat16 Tensor
      Cores); below 7.0 or unknown: ``float32`` (no Tensor Cores, so mixed precision is not
      faster). XLA is advisable on every GPU: it fuses element-wise ops into fewer kernels;
    * CPU only: ``mixed_bfloat16`` if the CPU has AVX512-BF16, AMX-BF16 or Arm BF16, else
      ``float32`` (bfloat16 would be emulated, which is slower). XLA is not recommended by
      default on CPU, which is also what Keras's ``jit_compile="auto"`` does; measure it
      with ``benchmarks/precision_xla.py``.

    Args:
        devices: Device descriptions to decide for. Defaults to ``None``: the devices
            TensorFlow sees (:func:`describe_devices`). Pass hand-built
            :class:`DeviceDescription` objects to ask about other hardware.

    Returns:
        A frozen :class:`PrecisionRecommendation`; ``str()`` of it reads as a short report.

    Raises:
        TypeError: If ``devices`` holds something other than :class:`DeviceDescription`.

    Example:
        >>> rec = recommend_precision([DeviceDescription("GPU", "T4", (7, 5))])
        >>> rec.policy, rec.loss_scaling
        ('mixed_float16', True)
    """
    devices = describe_devices() if devices is None else tuple(devices)
    for device in devices:
        if not isinstance(device, DeviceDescription):
            raise TypeError(
                "`devices` must contain DeviceDescription objects. "
                f"Received: devices containing {device!r} (of type {type(device).__name__})"
            )
    tpus = [d for d in devices if d.kind == "TPU"]
    gpus = [d for d in devices if d.kind == "GPU"]
    cpus = [d for d in devices if d.kind == "CPU"]
    if tpus:
        return _recommend(
            MIXED_BFLOAT16,
            "TPUs compute natively in bfloat16",
            True,
            "TPU programs are always compiled with XLA",
            devices,
        )
    if gpus:
        return _recommend_for_gpus(gpus, devices)
    return _recommend_for_cpu(cpus, devices)


def _recommend(
    policy: str,
    policy_reason: str,
    xla: bool,
    xla_reason: str,
    devices: tuple[DeviceDescription, ...],
) -> PrecisionRecommendation:
    if policy == MIXED_FLOAT16:
        loss_scaling_reason = (
            "float16 has a narrow exponent range, so small gradients underflow to zero "
            "unless the loss is scaled; model.fit does it by itself under mixed_float16"
        )
    elif policy == MIXED_BFLOAT16:
        loss_scaling_reason = "bfloat16 has float32's exponent range, so gradients do not underflow"
    else:
        loss_scaling_reason = "float32 gradients do not underflow"
    return PrecisionRecommendation(
        policy=policy,
        loss_scaling=policy == MIXED_FLOAT16,
        xla=xla,
        policy_reason=policy_reason,
        loss_scaling_reason=loss_scaling_reason,
        xla_reason=xla_reason,
        devices=devices,
    )


def _recommend_for_gpus(
    gpus: Sequence[DeviceDescription], devices: tuple[DeviceDescription, ...]
) -> PrecisionRecommendation:
    xla_reason = (
        "XLA fuses element-wise ops into fewer GPU kernels; Keras's jit_compile='auto' "
        "already uses it for model.fit on a GPU, custom loops need jit_compile=True"
    )
    known = [g.compute_capability for g in gpus if g.compute_capability is not None]
    if len(known) < len(gpus):
        return _recommend(
            FLOAT32,
            "the compute capability of a GPU is unknown (not an NVIDIA GPU, or TensorFlow "
            "reports no details), so a faster mixed policy cannot be confirmed",
            True,
            xla_reason,
            devices,
        )
    oldest = min(known)
    which = "every GPU has" if len(gpus) > 1 else "the GPU has"
    if oldest >= _BFLOAT16_MIN_CC:
        reason = (
            f"{which} compute capability {_cc(oldest)} (>= 8.0, Ampere or newer), whose "
            "Tensor Cores run bfloat16 as fast as float16 without needing loss scaling"
        )
        return _recommend(MIXED_BFLOAT16, reason, True, xla_reason, devices)
    if oldest >= _FLOAT16_MIN_CC:
        reason = (
            f"compute capability {_cc(oldest)} (7.x, Volta/Turing) has float16 Tensor Cores "
            "but no bfloat16 ones"
        )
        return _recommend(MIXED_FLOAT16, reason, True, xla_reason, devices)
    reason = (
        f"compute capability {_cc(oldest)} (< 7.0) has no Tensor Cores, so mixed precision "
        "would not be faster"
    )
    return _recommend(FLOAT32, reason, True, xla_reason, devices)


def _recommend_for_cpu(
    cpus: Sequence[DeviceDescription], devices: tuple[DeviceDescription, ...]
) -> PrecisionRecommendation:
    xla_reason = (
        "no GPU or TPU: XLA's gains on CPU depend on the model, so Keras's "
        "jit_compile='auto' leaves it off; measure before enabling it"
    )
    if any(cpu.supports_bfloat16 for cpu in cpus):
        flags = sorted(f for cpu in cpus for f in cpu.cpu_flags if f in _CPU_BF16_FLAGS)
        reason = (
            f"CPU only, with native bfloat16 instructions ({', '.join(flags)}) that "
            "TensorFlow's oneDNN kernels use"
        )
        return _recommend(MIXED_BFLOAT16, reason, False, xla_reason, devices)
    if any(cpu.cpu_flags for cpu in cpus):
        reason = "CPU only, without bfloat16 instructions: a mixed policy would be emulated"
    else:
        reason = "CPU only, and its features are unknown: float32 is the safe choice"
    return _recommend(FLOAT32, reason, False, xla_reason, devices)
