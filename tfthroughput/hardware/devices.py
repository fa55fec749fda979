"""Which GPUs this process uses, in TensorFlow's numbering, matched to NVML by UUID.

CUDA (and so TensorFlow) sees only the devices listed in ``CUDA_VISIBLE_DEVICES``, renumbered
from 0 in the order listed. Entries are indices, full UUIDs (``GPU-…``) or unique UUID prefixes;
CUDA ignores everything from the first entry it cannot resolve, and this module does the same.
Indices are taken in NVML's PCI-bus order, which is CUDA's order unless the machine mixes GPU
models and ``CUDA_DEVICE_ORDER`` is left at its ``FASTEST_FIRST`` default.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GPUDevice:
    """A GPU this process can use.

    Attributes:
        index: TensorFlow's index (``/GPU:<index>``), used in tag names (``gpu<index>/...``).
        nvml_index: NVML's index of the same board.
        uuid: The board's UUID, the identity the match is made on.
        name: Marketing name reported by NVML.
    """

    index: int
    nvml_index: int
    uuid: str
    name: str


def resolve_visible(uuids: Sequence[str], cuda_visible_devices: str | None) -> list[int]:
    """Map ``CUDA_VISIBLE_DEVICES`` to NVML indices, in the order CUDA numbers them.

    Args:
        uuids: The UUID of each NVML device, by NVML index.
        cuda_visible_devices: The variable's value; ``None`` (unset) means every device.

    Returns:
        NVML indices; position ``i`` in the list is TensorFlow's ``/GPU:i``.
    """
    if cuda_visible_devices is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for raw_entry in cuda_visible_devices.split(","):
        entry = raw_entry.strip()
        match = _match_entry(entry, uuids)
        if match is None or match in chosen:
            break  # CUDA drops the first unresolvable entry and everything after it
        chosen.append(match)
    return chosen


def _match_entry(entry: str, uuids: Sequence[str]) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return index if index < len(uuids) else None
    if entry.startswith("GPU-"):
        matches = [i for i, uuid in enumerate(uuids) if uuid and uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None  # MIG instances and anything else are not sampled per device


def visible_gpus(pynvml) -> list[GPUDevice]:
    """List the GPUs this process uses, through an initialised ``pynvml`` module."""
    uuids: list[str] = []
    names: list[str] = []
    for nvml_index in range(pynvml.nvmlDeviceGetCount()):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index)
            uuids.append(_text(pynvml.nvmlDeviceGetUUID(handle)))
            names.append(_text(pynvml.nvmlDeviceGetName(handle)))
        except pynvml.NVMLError:
            # A device NVML cannot describe (e.g. "GPU is lost") keeps its place, so the
            # others keep their indices; it matches no UUID, and sampling it fails and is
            # reported where its source is created.
            uuids.append("")
            names.append("unknown")
    order = resolve_visible(uuids, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return [
        GPUDevice(
            index=tf_index, nvml_index=nvml_index, uuid=uuids[nvml_index], name=names[nvml_index]
        )
        for tf_index, nvml_index in enumerate(order)
    ]


def driver_version(pynvml) -> str:
    """The NVIDIA driver's version through an initialised ``pynvml`` module."""
    return _text(pynvml.nvmlSystemGetDriverVersion())


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
