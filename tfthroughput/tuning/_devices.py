"""recommend_precision for the devices the Keras backend uses, with or without TensorFlow."""

from __future__ import annotations

import keras

from tfthroughput.precision.precision_recommendation import (
    DeviceDescription,
    PrecisionRecommendation,
    read_cpu_flags,
    recommend_precision,
)


def recommendation_here() -> PrecisionRecommendation:
    """What ``recommend_precision`` says for this machine: TensorFlow's device list under the
    TensorFlow backend; JAX's (or PyTorch's) GPUs and the CPU's flags otherwise."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return recommend_precision()
    devices = []
    if backend == "jax":
        import jax

        for device in jax.devices():
            if device.platform == "gpu":
                devices.append(DeviceDescription("GPU", device.device_kind, _cc(device)))
            elif device.platform == "tpu":
                devices.append(DeviceDescription("TPU", device.device_kind))
    elif backend == "torch":
        import torch

        for index in range(torch.cuda.device_count()):
            capability = tuple(int(v) for v in torch.cuda.get_device_capability(index))
            devices.append(DeviceDescription("GPU", torch.cuda.get_device_name(index), capability))
    name, flags = read_cpu_flags()
    devices.append(DeviceDescription("CPU", name, cpu_flags=flags))
    return recommend_precision(devices)


def _cc(device: object) -> tuple[int, int] | None:
    value = getattr(device, "compute_capability", None)
    try:
        major, minor = str(value).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None
