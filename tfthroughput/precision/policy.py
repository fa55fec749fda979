"""Mixed precision for the hardware at hand: recommend, set (scoped), and guard the known traps.

Keras's dtype policy is global state (per thread in Keras 3): a policy set for one experiment
silently applies to every model built afterwards. Everything here that changes it can put it back.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfthroughput._optional import import_tensorflow
from tfthroughput._validation import check_positive_int

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
_LOW_PRECISION = ("float16", "bfloat16")


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
        if self.kind not in _DEVICE_KINDS:
            raise ValueError(f"`kind` must be one of {_DEVICE_KINDS}. Received: kind={self.kind!r}")
        cc = self.compute_capability
        if cc is not None and (
            not isinstance(cc, tuple) or len(cc) != 2 or not all(isinstance(v, int) for v in cc)
        ):
            raise TypeError(
                "`compute_capability` must be a (major, minor) tuple of ints or None. "
                f"Received: compute_capability={cc!r}"
            )
        # Accept any iterable of flags but store an immutable, normalised set.
        object.__setattr__(self, "cpu_flags", frozenset(f.lower() for f in self.cpu_flags))

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


def _read_cpu_flags(path: str = "/proc/cpuinfo") -> tuple[str, frozenset[str]]:
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
    tf = import_tensorflow("tfthroughput.describe_devices")

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
    name, flags = _read_cpu_flags()
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


# --------------------------------------------------------------------------------------------
# Setting the policy, scoped.


@dataclass(frozen=True, eq=False)
class PolicyChange:
    """A change of Keras's global dtype policy, made by :func:`mixed_precision`.

    The change is already in force when this object exists. Use it as a context manager to
    undo the change on exit (also on exceptions), or call :meth:`restore` yourself.

    Attributes:
        previous: Name of the policy in force before, e.g. ``"float32"``.
        current: Name of the policy now in force, e.g. ``"mixed_bfloat16"``.
        recommendation: The :class:`PrecisionRecommendation` used when the policy was
            ``"auto"``, else ``None``.
    """

    previous: str
    current: str
    recommendation: PrecisionRecommendation | None
    _previous_policy: Any = field(repr=False)

    @property
    def changed(self) -> bool:
        """Whether the policy name differs from the one before."""
        return self.previous != self.current

    def restore(self) -> None:
        """Put back the exact policy object that was in force before."""
        import keras

        keras.config.set_dtype_policy(self._previous_policy)

    def __enter__(self) -> PolicyChange:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()

    def __str__(self) -> str:
        if not self.changed:
            return f"dtype policy unchanged: {self.current}"
        return f"dtype policy: {self.previous} -> {self.current}"


def mixed_precision(
    policy: Any = "auto",
    *,
    devices: Iterable[DeviceDescription] | None = None,
) -> PolicyChange:
    """Set Keras's global dtype policy; scoped when used in a ``with`` block.

    The call sets the policy at once and returns a :class:`PolicyChange` saying what changed.
    Used as a context manager, the previous policy (the same object) is restored on exit,
    also when the block raises. Policies apply to layers *created* while they are in force,
    so build the model inside the block; training it later keeps its dtypes. Keras keeps the
    policy per thread.

    Args:
        policy: Defaults to ``"auto"``: the policy :func:`recommend_precision` picks for the
            devices. Otherwise a Keras policy name (``"mixed_float16"``, ``"mixed_bfloat16"``,
            ``"float32"``, ...) or a ``keras.DTypePolicy``.
        devices: Only for ``"auto"``: the device descriptions to decide for. Defaults to
            ``None``: the devices TensorFlow sees.

    Returns:
        A :class:`PolicyChange` (``previous``, ``current``, ``recommendation``), usable as a
        context manager.

    Raises:
        ValueError: If ``policy`` is not a policy Keras knows, or ``devices`` is given
            without ``policy="auto"``.
        TypeError: If ``policy`` is neither a string nor a ``keras.DTypePolicy``.

    Example:
        >>> with mixed_precision("mixed_bfloat16"):  # scoped
        ...     model = build_model()
        >>> change = mixed_precision()  # one-shot, "auto"
        >>> print(change)
        dtype policy: float32 -> mixed_bfloat16
    """
    import keras

    recommendation = None
    if isinstance(policy, str) and policy == "auto":
        recommendation = recommend_precision(devices)
        new_policy: Any = keras.DTypePolicy(recommendation.policy)
    elif devices is not None:
        raise ValueError(
            f"`devices` is only used with policy='auto'. Received: policy={policy!r}, "
            f"devices={devices!r}"
        )
    elif isinstance(policy, keras.DTypePolicy):
        new_policy = policy
    elif isinstance(policy, str):
        try:
            new_policy = keras.DTypePolicy(policy)
        except ValueError as error:
            raise ValueError(
                "`policy` must be 'auto' or a Keras dtype policy name such as "
                f"'mixed_float16', 'mixed_bfloat16' or 'float32'. Received: policy={policy!r}"
            ) from error
    else:
        raise TypeError(
            "`policy` must be 'auto', a policy name or a keras.DTypePolicy. "
            f"Received: policy={policy!r} (of type {type(policy).__name__})"
        )
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(new_policy)
    return PolicyChange(
        previous=previous.name,
        current=new_policy.name,
        recommendation=recommendation,
        _previous_policy=previous,
    )


# --------------------------------------------------------------------------------------------
# Guards and helpers for the known traps.


def check_mixed_precision_outputs(model: Any, *, strict: bool = False) -> tuple[str, ...]:
    """Check that a model's outputs are not computed in float16/bfloat16.

    A model built under a mixed policy computes its last layer in float16 or bfloat16 too.
    A softmax (or logits fed to a loss) in that precision is numerically unstable; the fix is
    to give the output layer ``dtype="float32"``, e.g. ``keras.layers.Activation("softmax",
    dtype="float32")``.

    Args:
        model: A built Keras model (functional, ``Sequential`` or subclassed).
        strict: Defaults to ``False``: warn (``UserWarning``). ``True``: raise instead.

    Returns:
        The names of the offending outputs (output layer names), empty if all is well.

    Raises:
        ValueError: In strict mode, if an output is float16/bfloat16, or if the model is not
            built yet (its outputs are unknown).

    Example:
        >>> with mixed_precision("mixed_bfloat16"):
        ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        >>> check_mixed_precision_outputs(model)  # warns about 'dense'
        ('dense',)
    """
    offending = tuple(
        name for name, dtype in _output_dtypes(model) if _dtype_name(dtype) in _LOW_PRECISION
    )
    if offending:
        message = (
            f"Model {getattr(model, 'name', '')!r} has outputs computed in low precision: "
            + ", ".join(
                f"{name!r} ({_dtype_name(dtype)})"
                for name, dtype in _output_dtypes(model)
                if name in offending
            )
            + ". A softmax or logits in float16/bfloat16 is numerically unstable; build the "
            "output layer with dtype='float32', e.g. "
            "keras.layers.Activation('softmax', dtype='float32')."
        )
        if strict:
            raise ValueError(message)
        warnings.warn(message, UserWarning, stacklevel=2)
    return offending


def _output_dtypes(model: Any) -> list[tuple[str, Any]]:
    outputs = None
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):
        pass
    if outputs:
        return [(_producer_name(t), t.dtype) for t in outputs]
    # Subclassed models have no symbolic outputs: the last layer's compute dtype is the best
    # evidence of what the model returns.
    layers = getattr(model, "layers", None)
    if not getattr(model, "built", False) or not layers:
        raise ValueError(
            "`model` must be built (called on data or given an Input) so its outputs are "
            f"known. Received: model={getattr(model, 'name', model)!r} (built="
            f"{getattr(model, 'built', None)})"
        )
    return [(layers[-1].name, layers[-1].compute_dtype)]


def _producer_name(tensor: Any) -> str:
    history = getattr(tensor, "_keras_history", None)
    if history is not None:
        return history.operation.name
    return getattr(tensor, "name", "output")


def _dtype_name(dtype: Any) -> str:
    return getattr(dtype, "name", str(dtype))


def loss_scale_optimizer(optimizer: Any, *, policy: Any = None) -> Any:
    """Wrap an optimizer in ``keras.optimizers.LossScaleOptimizer`` when float16 is in force.

    ``model.fit`` does this by itself under ``mixed_float16``; a custom training loop must do
    it and then call ``optimizer.scale_loss(loss)`` before taking gradients (Keras 3's
    ``apply`` unscales them and skips steps whose gradients are not finite).

    Args:
        optimizer: A Keras optimizer, or a name such as ``"adam"``.
        policy: The policy to decide for. Defaults to ``None``: Keras's global policy.
            A policy name or ``keras.DTypePolicy``.

    Returns:
        A ``LossScaleOptimizer`` around ``optimizer`` when the policy computes in float16;
        otherwise ``optimizer`` itself (resolved from its name). An optimizer that is already
        a ``LossScaleOptimizer`` is returned as is.

    Example:
        >>> with mixed_precision("mixed_float16"):
        ...     optimizer = loss_scale_optimizer(keras.optimizers.SGD(0.1))
        >>> type(optimizer).__name__
        'LossScaleOptimizer'
    """
    import keras

    optimizer = keras.optimizers.get(optimizer)
    if policy is None:
        policy = keras.config.dtype_policy()
    elif isinstance(policy, str):
        policy = keras.DTypePolicy(policy)
    elif not isinstance(policy, keras.DTypePolicy):
        raise TypeError(
            "`policy` must be None, a policy name or a keras.DTypePolicy. "
            f"Received: policy={policy!r} (of type {type(policy).__name__})"
        )
    if policy.compute_dtype != "float16" or isinstance(
        optimizer, keras.optimizers.LossScaleOptimizer
    ):
        return optimizer
    return keras.optimizers.LossScaleOptimizer(optimizer)


def with_gradient_accumulation(optimizer: Any, steps: int) -> Any:
    """A copy of an optimizer that accumulates gradients over ``steps`` batches.

    Uses Keras 3's own ``gradient_accumulation_steps`` option: variables are updated every
    ``steps`` batches with the mean gradient, so a batch of ``b`` trains like one of
    ``b * steps`` when memory (e.g. after moving to a larger model) limits ``b``. Learning-rate
    schedules then count optimizer updates, not batches.

    Args:
        optimizer: A Keras optimizer that has not been built yet (its accumulators are
            created when it is built), or a name such as ``"adam"``. A
            ``LossScaleOptimizer`` has its inner optimizer rebuilt.
        steps: Batches per update; ``1`` means no accumulation.

    Returns:
        A new optimizer of the same class and configuration, with
        ``gradient_accumulation_steps`` set.

    Raises:
        ValueError: If ``steps`` is not a positive int, or ``optimizer`` is already built.

    Example:
        >>> optimizer = with_gradient_accumulation(keras.optimizers.Adam(1e-3), steps=4)
        >>> model.compile(optimizer=optimizer, loss="mse")  # batch 64 trains like 256
    """
    import keras

    check_positive_int("steps", steps)
    optimizer = keras.optimizers.get(optimizer)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        inner = with_gradient_accumulation(optimizer.inner_optimizer, steps)
        config = optimizer.get_config()
        return keras.optimizers.LossScaleOptimizer(
            inner,
            initial_scale=config["initial_scale"],
            dynamic_growth_steps=config["dynamic_growth_steps"],
            name=optimizer.name,
        )
    if optimizer.built:
        raise ValueError(
            "`optimizer` must not be built yet: gradient accumulators are created when it is "
            f"built. Received: optimizer={optimizer.name!r} (built=True). Pass a fresh "
            "optimizer, before model.compile()/fit()."
        )
    config = optimizer.get_config()
    config["gradient_accumulation_steps"] = steps if steps > 1 else None
    return type(optimizer).from_config(config)
