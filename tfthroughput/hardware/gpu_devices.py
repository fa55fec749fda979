"""Which GPUs this process uses, in TensorFlow's numbering, matched to NVML by UUID.

CUDA (and so TensorFlow) sees only the devices listed in ``CUDA_VISIBLE_DEVICES``, renumbered
from 0 in the order listed. Entries are indices, full UUIDs (``GPU-…``) or unique UUID prefixes,
or MIG device UUIDs (``MIG-…``, as ``nvidia-smi -L`` lists them), which resolve to that MIG
slice of its GPU; CUDA ignores everything from the first entry it cannot resolve, and this
module does the same.
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
        nvml_index: NVML's index of the same board (for a MIG slice, of its GPU).
        uuid: The board's UUID (a MIG slice's ``MIG-…`` UUID), the identity the match is made on.
        name: Marketing name reported by NVML.
        mig_index: For a MIG slice, its index among its GPU's MIG devices
            (``nvmlDeviceGetMigDeviceHandleByIndex``); None for a whole GPU.
    """

    index: int
    nvml_index: int
    uuid: str
    name: str
    mig_index: int | None = None


@dataclass(frozen=True)
class _MIGSlice:
    uuid: str
    name: str
    nvml_index: int
    mig_index: int


def resolve_visible(
    uuids: Sequence[str], cuda_visible_devices: str | None, mig_uuids: Sequence[str] = ()
) -> list[int]:
    """Map ``CUDA_VISIBLE_DEVICES`` to devices, in the order CUDA numbers them.

    Args:
        uuids: The UUID of each NVML device, by NVML index.
        cuda_visible_devices: The variable's value; ``None`` (unset) means every device.
        mig_uuids: The UUIDs of the MIG slices that ``MIG-…`` entries may name.

    Returns:
        Positions in ``[*uuids, *mig_uuids]`` (below ``len(uuids)``: NVML indices); position
        ``i`` in the list is TensorFlow's ``/GPU:i``.
    """
    if cuda_visible_devices is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for raw_entry in cuda_visible_devices.split(","):
        entry = raw_entry.strip()
        match = _match_entry(entry, uuids, mig_uuids)
        if match is None or match in chosen:
            break  # CUDA drops the first unresolvable entry and everything after it
        chosen.append(match)
    return chosen


def _match_entry(entry: str, uuids: Sequence[str], mig_uuids: Sequence[str]) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return index if index < len(uuids) else None
    if entry.startswith(("GPU-", "MIG-")):
        candidates = list(uuids) + list(mig_uuids)
        matches = [i for i, uuid in enumerate(candidates) if uuid and uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None


def visible_gpus(pynvml) -> list[GPUDevice]:
    """The NVML step of :func:`tfthroughput.hardware.find_gpus`: the GPUs this process uses, in
    TensorFlow's numbering, through an initialised ``pynvml`` module.

    ``find_gpus`` is the one way to list GPUs (it never raises, and says why none were found);
    this step raises ``pynvml.NVMLError`` where NVML cannot count the devices, and is kept
    apart only so that discovery can reuse the ``pynvml`` module it initialised.
    """
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
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    # MIG slices are listed only when asked for: it costs NVML calls on every GPU otherwise.
    slices = _mig_slices(pynvml, len(uuids)) if visible and "MIG-" in visible else []
    order = resolve_visible(uuids, visible, [mig.uuid for mig in slices])
    devices = []
    for tf_index, position in enumerate(order):
        if position < len(uuids):
            devices.append(GPUDevice(tf_index, position, uuids[position], names[position]))
        else:
            mig = slices[position - len(uuids)]
            devices.append(GPUDevice(tf_index, mig.nvml_index, mig.uuid, mig.name, mig.mig_index))
    return devices


def _mig_slices(pynvml, count: int) -> list[_MIGSlice]:
    """Every MIG slice of every GPU in MIG mode."""
    slices = []
    for nvml_index in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index)
            if pynvml.nvmlDeviceGetMigMode(handle)[0] != 1:
                continue
            slots = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
        except (pynvml.NVMLError, AttributeError):
            continue  # no MIG on this GPU (or bindings without it)
        for mig_index in range(slots):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, mig_index)
                uuid, name = (
                    _text(pynvml.nvmlDeviceGetUUID(mig)),
                    _text(pynvml.nvmlDeviceGetName(mig)),
                )
            except pynvml.NVMLError:
                continue  # an empty slot ("not found")
            slices.append(_MIGSlice(uuid, name, nvml_index, mig_index))
    return slices


def driver_version(pynvml) -> str:
    """The NVIDIA driver's version through an initialised ``pynvml`` module."""
    return _text(pynvml.nvmlSystemGetDriverVersion())


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
