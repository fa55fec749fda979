"""``tfthroughput info``: versions, devices, NVML status and the precision recommendation."""

from __future__ import annotations

import argparse

from tfthroughput._startup import load_tensorflow
from tfthroughput.cli.options import SubParsers, add_command


def add(commands: SubParsers) -> None:
    """Declare ``info``."""
    add_command(
        commands,
        "info",
        run,
        help="TensorFlow/Keras versions, devices, NVML status and the precision recommendation",
        description="Prints what tfthroughput sees on this machine.",
    )


def run(args: argparse.Namespace) -> int:
    """Print what tfthroughput sees on this machine; returns the exit status."""
    load_tensorflow(verbose=args.verbose)
    import keras
    import tensorflow as tf

    from tfthroughput.hardware.discovery import find_gpus
    from tfthroughput.precision.precision_recommendation import recommend_precision

    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}")
    devices = tf.config.list_physical_devices()
    print("TensorFlow devices: " + ", ".join(device.name for device in devices))
    gpus = find_gpus()
    if gpus.driver_version is None:
        print(f"NVML: unavailable: {gpus.reason}")
    elif not gpus.devices:
        print(f"NVML: driver {gpus.driver_version}; {gpus.reason}")
    else:
        count = len(gpus.devices)
        print(f"NVML: driver {gpus.driver_version}, {count} GPU(s) visible to this process")
        for gpu in gpus.devices:
            print(f"  gpu{gpu.index}: {gpu.name} ({gpu.uuid})")
    print(recommend_precision())
    return 0
