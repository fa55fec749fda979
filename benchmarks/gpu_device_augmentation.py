"""``benchmarks/device_augmentation.py`` on a GPU: per-example augmentation on the host vs per
batch in the training step on the GPU, with the host held to a few cores per GPU.

Needs TensorFlow with a visible GPU (the project's GPU machine has no TensorFlow, so this has
not been run there); without one it says so and exits with status 2. It runs the CPU script's
comparison at 224 px -> 192 px, batches of 128, the pipelines on a private pool of
``--host-threads`` threads (default 4: the few vCPUs a large cloud's 8-GPU machine gives each
GPU), and prints the GPU and the driver's view of it first. The last line is the CPU script's
summary: examples/s of the device version over the per-example version, CPU seconds per 1000
examples of the whole process and of the pipeline alone (what stays on the host).

Run: ``python benchmarks/gpu_device_augmentation.py [--host-threads 4] [--jit]
[any option of device_augmentation.py]``
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402
from device_augmentation import main  # noqa: E402

DEFAULTS = ["--images", "2048", "--size", "224", "--out", "192", "--batch-size", "128"]


def run(argv=None):
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        print("no GPU visible to TensorFlow: run benchmarks/device_augmentation.py on a CPU")
        return 2
    print(
        f"GPUs: {[tf.config.experimental.get_device_details(g).get('device_name') for g in gpus]}"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--host-threads" not in argv:
        argv += ["--host-threads", "4"]
    main(DEFAULTS + argv)  # later options win: argparse keeps the last value given
    return 0


if __name__ == "__main__":
    sys.exit(run())
