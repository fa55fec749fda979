"""Configure TensorFlow's GPUs (memory growth, memory limits, visibility) before first use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfthroughput._optional import import_tensorflow
from tfthroughput._validation import check_bool

# TensorFlow raises RuntimeError with these words when the device configuration is changed after
# the runtime has created its devices.
_ALREADY_INITIALISED = "cannot be modified after being initialized"


class GPUsAlreadyInitializedError(RuntimeError):
    """:func:`configure_gpus` was called after TensorFlow had set up its GPUs."""


@dataclass(frozen=True)
class GPUConfiguration:
    """What :func:`configure_gpus` set.

    Attributes:
        visible: Names of the physical GPUs left visible, e.g.
            ``("/physical_device:GPU:0",)``; empty when there is no GPU.
        memory_growth: Names of the visible GPUs whose memory grows on demand.
        memory_limits_mib: ``(name, MiB)`` for each visible GPU given a memory limit.
    """

    visible: tuple[str, ...]
    memory_growth: tuple[str, ...]
    memory_limits_mib: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        if not self.visible:
            return "no GPU visible to TensorFlow: nothing configured"
        lines = [f"{len(self.visible)} GPU(s) visible: {', '.join(self.visible)}"]
        if self.memory_growth:
            lines.append(f"memory growth on: {', '.join(self.memory_growth)}")
        for name, limit in self.memory_limits_mib:
            lines.append(f"memory limit {limit} MiB: {name}")
        return "\n".join(lines)


def configure_gpus(
    memory_growth: bool = True,
    *,
    memory_limit_mib: int | Mapping[int, int] | None = None,
    visible: Sequence[int] | None = None,
) -> GPUConfiguration:
    """Configure TensorFlow's GPUs; call it first thing, before TensorFlow uses them.

    By default TensorFlow reserves almost all memory of every GPU it sees at start-up, which
    hides real usage from monitors and blocks other processes. Memory growth allocates on
    demand instead; a memory limit caps a GPU (TensorFlow then exposes it as one logical
    device of that size). With no GPU this does nothing and returns an empty configuration.

    Args:
        memory_growth: Defaults to ``True``: let memory grow on demand on every visible GPU
            that is not given a memory limit (TensorFlow cannot do both on one GPU).
        memory_limit_mib: Defaults to ``None``: no limit. An int limits every visible GPU, in
            MiB; a mapping ``{gpu_index: MiB}`` limits only those GPUs.
        visible: Defaults to ``None``: all GPUs stay visible. Otherwise the indices of the
            physical GPUs TensorFlow may use, e.g. ``[0]``; others are hidden.

    Returns:
        A frozen :class:`GPUConfiguration` naming what was set.

    Raises:
        GPUsAlreadyInitializedError: If TensorFlow has already initialised its GPUs (an op,
            model or dataset ran before this call), with what to do about it.
        TypeError: If an argument has the wrong type.
        ValueError: If a GPU index is negative or out of range, or a memory limit is not
            positive. Arguments are checked in full also where there is no GPU, so a mistake
            shows on the machine where the code is written.

    Example:
        >>> import tfthroughput
        >>> config = tfthroughput.configure_gpus(memory_growth=True)  # before anything else
        >>> print(config)  # doctest: +SKIP
        1 GPU(s) visible: /physical_device:GPU:0
        memory growth on: /physical_device:GPU:0
    """
    tf = import_tensorflow("tfthroughput.configure_gpus")

    return _configure(
        tf.config,
        memory_growth=memory_growth,
        memory_limit_mib=memory_limit_mib,
        visible=visible,
    )


def _configure(
    config: Any,
    *,
    memory_growth: bool,
    memory_limit_mib: int | Mapping[int, int] | None,
    visible: Sequence[int] | None,
) -> GPUConfiguration:
    """The work of :func:`configure_gpus` against a ``tf.config``-like object."""
    check_bool("memory_growth", memory_growth)
    gpus = list(config.list_physical_devices("GPU"))
    indices = _check_visible(visible, len(gpus))
    limits = _check_limits(memory_limit_mib, indices, len(gpus))
    if not gpus:
        return GPUConfiguration((), (), ())
    chosen = [gpus[i] for i in indices]
    grown: list[str] = []
    limited: list[tuple[str, int]] = []
    try:
        if len(chosen) != len(gpus):
            config.set_visible_devices(chosen, "GPU")
        for index, gpu in zip(indices, chosen, strict=True):
            if index in limits:
                config.set_logical_device_configuration(
                    gpu, [config.LogicalDeviceConfiguration(memory_limit=limits[index])]
                )
                limited.append((gpu.name, limits[index]))
            elif memory_growth:
                config.experimental.set_memory_growth(gpu, True)
                grown.append(gpu.name)
    except RuntimeError as error:
        raise _translate(error) from error
    return GPUConfiguration(
        visible=tuple(gpu.name for gpu in chosen),
        memory_growth=tuple(grown),
        memory_limits_mib=tuple(limited),
    )


def _translate(error: RuntimeError) -> RuntimeError:
    if _ALREADY_INITIALISED not in str(error):
        return error
    return GPUsAlreadyInitializedError(
        "configure_gpus() must run before TensorFlow initialises its GPUs, and they already "
        f"are ({error}). Call it at the very start of the program, before any tensor, model "
        "or tf.data pipeline is created; in a notebook, restart the kernel and call it in "
        "the first cell."
    )


def _check_visible(visible: Sequence[int] | None, count: int) -> list[int]:
    if visible is None:
        return list(range(count))
    if isinstance(visible, (str, bytes)) or not isinstance(visible, Sequence):
        raise TypeError(
            f"`visible` must be a sequence of GPU indices or None. Received: visible={visible!r}"
        )
    for index in visible:
        _check_gpu_index("visible", visible, index)
        # Without GPUs there is nothing to select, so only the upper bound waits for one.
        if count and index >= count:
            raise ValueError(
                f"`visible` indices must be in [0, {count}) for the {count} GPU(s) TensorFlow "
                f"sees. Received: visible={visible!r}"
            )
    return sorted(set(visible)) if count else []


def _check_limits(
    memory_limit_mib: int | Mapping[int, int] | None, indices: list[int], count: int
) -> dict[int, int]:
    """The limit per visible GPU index; checked in full even without a GPU to apply it to."""
    if memory_limit_mib is None:
        return {}
    per_gpu = isinstance(memory_limit_mib, Mapping)
    if per_gpu:
        for index in memory_limit_mib:
            _check_gpu_index("memory_limit_mib", memory_limit_mib, index)
    for limit in memory_limit_mib.values() if per_gpu else [memory_limit_mib]:
        expected = (
            "`memory_limit_mib` must be a positive int (MiB) or a mapping of GPU index to "
            f"one. Received: memory_limit_mib={memory_limit_mib!r}"
        )
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(expected)
        if limit <= 0:
            raise ValueError(expected)
    if not per_gpu:
        return {index: memory_limit_mib for index in indices}
    for index in memory_limit_mib:
        if count and index not in indices:
            raise ValueError(
                f"`memory_limit_mib` names GPU {index}, which is not visible (visible: "
                f"{indices}). Received: memory_limit_mib={memory_limit_mib!r}"
            )
    return dict(memory_limit_mib)


def _check_gpu_index(name: str, value: object, index: object) -> None:
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"`{name}` must use int GPU indices. Received: {name}={value!r}")
    if index < 0:
        raise ValueError(f"`{name}` must use GPU indices of 0 or more. Received: {name}={value!r}")
