"""What every tune search shares around its trials: the dtype policy to try (from
``recommend_precision`` for the devices the Keras backend uses, with or without TensorFlow), a
clean Keras session between searches, the caller's random state kept, and the GPU sampler."""

from __future__ import annotations

import contextlib
import gc
import random
import sys
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from tfthroughput.precision.precision_recommendation import (
    DeviceDescription,
    PrecisionRecommendation,
    read_cpu_flags,
    recommend_precision,
)
from tfthroughput.tuning.training.distribution import may_clear_session


def clear_session(policy: Any) -> None:
    """Free the previous models' memory, keeping the dtype policy (clear_session resets it)."""
    if may_clear_session():
        keras.backend.clear_session()
    else:
        gc.collect()  # inside a strategy's scope: the models' memory without Keras's state
    keras.config.set_dtype_policy(policy)


@contextlib.contextmanager
def random_state_kept() -> Iterator[None]:
    """The caller's random state as it was, whatever ran inside (a search seeds every trial
    and clears Keras's session): Python's and NumPy's, Keras's global seed and seed
    generator, TensorFlow's global seed with the sequence of operation seeds it hands out
    (what a later unseeded shuffle in ``fit`` draws from) and PyTorch's. A program that
    trains after a search draws what it would have drawn without one."""
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED

    keras_state = {
        name: global_state.get_global_attribute(name)
        for name in (GLOBAL_RANDOM_SEED, GLOBAL_SEED_GENERATOR)
    }
    python, numpy = random.getstate(), np.random.get_state()
    tensorflow, torch = _tensorflow_seeds(), _torch_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
        for name, value in keras_state.items():
            global_state.set_global_attribute(name, value)
        _restore_tensorflow_seeds(tensorflow)
        if torch is not None:
            sys.modules["torch"].random.set_rng_state(torch)


def _tensorflow_seeds() -> tuple[Any, Any] | None:
    """TensorFlow's global seed and the state of the generator of its operation seeds (the
    eager context's own: TensorFlow has no public way to read it), or None without TensorFlow."""
    if "tensorflow" not in sys.modules:
        return None
    from tensorflow.python.eager import context

    operation_seeds = getattr(context.context(), "_rng", None)
    state = operation_seeds.getstate() if isinstance(operation_seeds, random.Random) else None
    return context.global_seed(), state


def _restore_tensorflow_seeds(seeds: tuple[Any, Any] | None) -> None:
    if seeds is None:
        return
    import tensorflow as tf
    from tensorflow.python.eager import context

    global_seed, state = seeds
    tf.random.set_seed(global_seed)
    operation_seeds = getattr(context.context(), "_rng", None)
    if state is not None and isinstance(operation_seeds, random.Random):
        operation_seeds.setstate(state)


def _torch_state() -> Any:
    torch = sys.modules.get("torch")
    return None if torch is None else torch.random.get_rng_state()


def policy_to_try(precision: object, notes: list[str]) -> str | None:
    """The recommended policy to try, or ``None`` (with a note saying why) when there is none."""
    if precision is False:
        return None
    if precision is None or precision is True:
        precision = recommendation_here()
    if not isinstance(precision, PrecisionRecommendation):
        raise TypeError(
            "`precision` must be None, False or a PrecisionRecommendation (from "
            f"recommend_precision). Received: precision={precision!r}"
        )
    current = keras.config.dtype_policy().name
    if precision.policy in (current, "float32"):
        notes.append(
            f"dtype policy not tried: recommend_precision says {precision.policy} "
            f"({precision.policy_reason})"
        )
        return None
    return precision.policy


def gpu_sampler() -> Any:
    """A started sampler of GPU-Util and SM activity, or ``None`` without a GPU."""
    from tfthroughput.hardware.discovery import discover_sources
    from tfthroughput.hardware.sampler import Sampler

    discovery = discover_sources(["utilization_percent", "sm_activity_percent"], host=False)
    if not discovery.sources:
        return None
    return Sampler(discovery.sources, interval=0.05).start()


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
