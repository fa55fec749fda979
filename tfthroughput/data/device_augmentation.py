"""Random augmentation in the training step: what ``build_pipeline(augment_on="device")`` plans.

With ``augment_on="device"`` the pipeline stops after ``batch`` and ships what it decoded
(``uint8`` images, a quarter of the bytes of ``float32``); ``augment_fn`` and ``batch_fn``
run once per batch inside the compiled training step instead, on the accelerator, where a
:class:`~tfthroughput.data.DeviceAugmented` model applies them. This module holds that plan
(:class:`DeviceWork`), the checks it passes when the pipeline is built, and the record that ties
it to the dataset, so that the wrapper finds the functions from the dataset alone.

The checks run the functions eagerly on a probe batch (one synthetic example repeated
:data:`PROBE_EXAMPLES` times) and refuse, with one line naming the argument, a function that
cannot run on a batch, one that is not random (the same batch from several draws; such work
belongs in ``preprocess_fn``), and one that draws a single value for the whole batch (every
example the same crop), as ``tf.image.random_brightness`` or ``keras.layers.RandomCrop`` do.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from tfthroughput.data.batch_bytes import batch_bytes

AUGMENT_ON = ("cpu", "device")

# Copies of one example in the probe batch: a per-example coin flip leaves all of them alike
# with probability 2**-31, so a good function is never refused by chance.
PROBE_EXAMPLES = 32


@dataclass(frozen=True)
class DeviceWork:
    """The functions a pipeline built with ``augment_on="device"`` leaves to the training step.

    Attributes:
        augment_fn: Random work on a whole batch, applied in training steps only; or ``None``.
        batch_fn: Deterministic work on a whole batch (cast, normalise), applied in training,
            evaluation and prediction steps, after ``augment_fn``; or ``None``.
        shipped_spec: The ``element_spec`` of the batches the pipeline yields (what crosses
            from the host to the device).
        model_spec: The ``element_spec`` after the device work (what the model receives).
    """

    augment_fn: Callable[..., Any] | None
    batch_fn: Callable[..., Any] | None
    shipped_spec: Any = None
    model_spec: Any = None

    def train(self, data: Any) -> Any:
        """A training batch after the device work: ``augment_fn``, then ``batch_fn``."""
        self.check_batch(data, "training")
        return _call(self.batch_fn, _call(self.augment_fn, data))

    def infer(self, data: Any) -> Any:
        """An evaluation or prediction batch after the device work: ``batch_fn`` only."""
        self.check_batch(data, "evaluation or prediction")
        return _call(self.batch_fn, data)

    def check_batch(self, data: Any, where: str) -> None:
        """Refuse batches unlike the ones the pipeline ships (checked once, while traced).

        A batch already augmented or normalised (a pipeline built with ``augment_on="cpu"``
        passed as ``validation_data``, say) would otherwise be normalised a second time.

        Raises:
            ValueError: If the structure or a dtype differs from :attr:`shipped_spec`.
        """
        if self.shipped_spec is None:
            return
        expected = _dtypes(self.shipped_spec)
        try:
            received = _dtypes(data)
            tf.nest.assert_same_structure(expected, received)
        except (ValueError, TypeError, AttributeError):
            received = None
        if received is None or tf.nest.flatten(received) != tf.nest.flatten(expected):
            raise ValueError(
                f"`data` for {where} must be batches like the ones the pipeline built with "
                f'augment_on="device" ships ({_shapes(self.shipped_spec)}), since its device '
                "work (batch_fn) runs on them; call the wrapped model for data prepared "
                f"otherwise. Received: a batch of {_shapes(data)}"
            )


def plan_device_work(
    augment_on: Any,
    *,
    augment_fn: Callable[..., Any] | None,
    batch_fn: Callable[..., Any] | None,
    batch_size: int | None,
) -> DeviceWork | None:
    """Check ``augment_on`` and say what moves to the training step (``None``: nothing).

    Raises:
        TypeError: If ``augment_on`` is not a string.
        ValueError: If ``augment_on`` is not ``"cpu"`` or ``"device"``, or ``"device"`` is
            asked for without a ``batch_size`` or without an ``augment_fn`` or ``batch_fn``.
    """
    if not isinstance(augment_on, str):
        raise TypeError(
            f'`augment_on` must be "cpu" or "device". Received: augment_on={augment_on!r}'
        )
    if augment_on not in AUGMENT_ON:
        raise ValueError(
            f'`augment_on` must be "cpu" or "device". Received: augment_on={augment_on!r}'
        )
    if augment_on == "cpu":
        return None
    if batch_size is None:
        raise ValueError(
            '`augment_on="device"` runs the work on whole batches, so it needs a `batch_size`. '
            'Received: batch_size=None, augment_on="device"'
        )
    if augment_fn is None and batch_fn is None:
        raise ValueError(
            '`augment_on="device"` moves `augment_fn` (and `batch_fn`) into the training step, '
            'but neither was given. Received: augment_fn=None, batch_fn=None, augment_on="device"'
        )
    return DeviceWork(augment_fn=augment_fn, batch_fn=batch_fn)


def probe_device_work(work: DeviceWork, shipped_spec: Any) -> DeviceWork:
    """Run the work on a probe batch of ``shipped_spec`` and return it with both specs filled in.

    Raises:
        TypeError: If a function returns ``None``.
        ValueError: If a function cannot run on a batch, ``augment_fn`` changes the structure,
            is not random, or draws one value for the whole batch.
    """
    probe = _probe_batch(shipped_spec)
    data = probe
    if work.augment_fn is not None:
        first = _run(work.augment_fn, "augment_fn", probe, same_structure=True)
        second = _run(work.augment_fn, "augment_fn", probe, same_structure=True)
        for _ in range(_REDRAWS):  # a random function of few outcomes (a small crop) repeats
            if _same(first, second):
                second = _run(work.augment_fn, "augment_fn", probe, same_structure=True)
        _check_random(work.augment_fn, first, second)
        data = first
    if work.batch_fn is not None:
        data = _run(work.batch_fn, "batch_fn", data, same_structure=False)
    model_spec = tf.nest.map_structure(lambda t: tf.TensorSpec([None, *t.shape[1:]], t.dtype), data)
    return DeviceWork(work.augment_fn, work.batch_fn, shipped_spec, model_spec)


# Device work of the datasets build_pipeline returned; weak keys, as for their descriptions.
_DEVICE_WORK: weakref.WeakKeyDictionary[tf.data.Dataset, DeviceWork] = weakref.WeakKeyDictionary()


def record_device_work(dataset: tf.data.Dataset, work: DeviceWork) -> None:
    """Tie ``work`` to the dataset ``build_pipeline`` returns."""
    _DEVICE_WORK[dataset] = work


def device_work_of(dataset: Any) -> DeviceWork:
    """The device work of a dataset built with ``augment_on="device"``.

    Raises:
        TypeError: If ``dataset`` is not a ``tf.data.Dataset``.
        ValueError: If it was not built by ``build_pipeline(..., augment_on="device")``.
    """
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"`dataset` must be a tf.data.Dataset. Received: dataset={dataset!r} "
            f"of type {type(dataset).__name__}"
        )
    work = _DEVICE_WORK.get(dataset)
    if work is None:
        raise ValueError(
            '`dataset` must be returned by build_pipeline(..., augment_on="device") (a '
            "transformation applied afterwards makes a new dataset); it has no work for the "
            f"training step. Received: dataset={dataset!r}"
        )
    return work


def transfer_fields(
    dataset: tf.data.Dataset, batch_size: int | None, device_work: DeviceWork | None
) -> dict[str, Any]:
    """The description's fields on bytes per batch; device work is probed and recorded here.

    Raises:
        TypeError, ValueError: As :func:`probe_device_work`.
    """
    transfer: dict[str, Any] = {"bytes_per_batch": batch_bytes(dataset.element_spec, batch_size)}
    if device_work is not None:
        device_work = probe_device_work(device_work, dataset.element_spec)
        record_device_work(dataset, device_work)
        transfer["device_functions"] = tuple(
            name
            for name, fn in (
                ("augment_fn", device_work.augment_fn),
                ("batch_fn", device_work.batch_fn),
            )
            if fn is not None
        )
        transfer["model_bytes_per_batch"] = batch_bytes(device_work.model_spec, batch_size)
    return transfer


# How to rebuild a pipeline that augments on the CPU with other arguments: diagnose times it
# without the augmentation, tune tries it with augment_on="device".
_REBUILDS: weakref.WeakKeyDictionary[tf.data.Dataset, Callable[..., tf.data.Dataset]] = (
    weakref.WeakKeyDictionary()
)


def record_cpu_augmentation(
    dataset: tf.data.Dataset, rebuild: Callable[..., tf.data.Dataset]
) -> None:
    """Note that ``dataset`` augments on the CPU; ``rebuild(**changes)`` builds it anew with
    ``build_pipeline``'s arguments changed."""
    _REBUILDS[dataset] = rebuild


def rebuilt(dataset: tf.data.Dataset, **changes: Any) -> tf.data.Dataset | None:
    """The pipeline ``build_pipeline`` made, built anew with ``changes`` to its arguments (e.g.
    ``augment_fn=None``, or ``augment_on="device"``); ``None`` if ``dataset`` was not built by
    ``build_pipeline`` with an ``augment_fn`` on the CPU.

    Raises:
        Whatever ``build_pipeline`` raises for the changed arguments (e.g. a function that
        cannot run on batches, refused for ``augment_on="device"``).
    """
    rebuild = _REBUILDS.get(dataset)
    return None if rebuild is None else rebuild(**changes)


def without_augmentation(dataset: tf.data.Dataset) -> tf.data.Dataset | None:
    """The same pipeline without its per-example ``augment_fn``, built anew (see
    :func:`rebuilt`)."""
    return rebuilt(dataset, augment_fn=None)


def _call(fn: Callable[..., Any] | None, data: Any) -> Any:
    """Call ``fn`` as ``tf.data``'s ``map`` does: a tuple element is unpacked into arguments."""
    if fn is None:
        return data
    return fn(*data) if isinstance(data, tuple) else fn(data)


def _probe_batch(spec: Any) -> Any:
    """One synthetic example per tensor, repeated :data:`PROBE_EXAMPLES` times along axis 0.

    Scalars per example (labels, ids) are zeros, so a function may index with them; tensors
    with axes (images, audio) are random, so that a flip or a crop changes them visibly.
    """
    rng = np.random.default_rng(0)

    def one(tensor_spec: Any) -> tf.Tensor:
        if (
            not isinstance(tensor_spec, tf.TensorSpec)
            or not tensor_spec.shape[1:].is_fully_defined()
        ):
            raise ValueError(
                '`augment_on="device"` needs batches of dense tensors with known shapes. '
                f"Received: element_spec={spec}"
            )
        shape = tuple(tensor_spec.shape[1:])
        dtype = tensor_spec.dtype
        if not shape or dtype == tf.bool or dtype == tf.string:
            example = np.zeros(shape, dtype=dtype.as_numpy_dtype)
        elif dtype.is_integer:
            example = rng.integers(0, min(256, dtype.max), shape).astype(dtype.as_numpy_dtype)
        else:
            example = rng.random(shape).astype(dtype.as_numpy_dtype)
        return tf.constant(np.repeat(example[None], PROBE_EXAMPLES, axis=0))

    return tf.nest.map_structure(one, spec)


def _run(fn: Callable[..., Any], name: str, data: Any, *, same_structure: bool) -> Any:
    try:
        result = _call(fn, data)
    except Exception as error:  # any failure on a batch is the same mistake for the user
        reason = _first_line(error)
        raise ValueError(
            f'`{name}` cannot run on batches, as augment_on="device" needs ({reason}); write it '
            "with ops that take a leading batch axis (e.g. Keras preprocessing layers). "
            f"Received: {name}={fn!r} on a batch of {_shapes(data)}"
        ) from None
    if result is None:
        raise TypeError(
            f"`{name}` must return a tensor or a structure of tensors, but it returned None "
            f"(a missing `return`?). Received: {name}={fn!r}"
        )
    if same_structure:
        try:
            tf.nest.assert_same_structure(data, result, check_types=False)
        except (ValueError, TypeError):
            raise ValueError(
                f"`{name}` must return the same structure it receives (e.g. (images, labels) "
                f"-> (images, labels)). Received: {name}={fn!r} returned {_shapes(result)} for "
                f"{_shapes(data)}"
            ) from None
    return tf.nest.map_structure(tf.convert_to_tensor, result)


_REDRAWS = 3  # draws after a repeat before a function is called deterministic


def _same(first: Any, second: Any) -> bool:
    pairs = zip(tf.nest.flatten(first), tf.nest.flatten(second), strict=True)
    return all(np.array_equal(a.numpy(), b.numpy()) for a, b in pairs)


def _check_random(fn: Callable[..., Any], first: Any, second: Any) -> None:
    if _same(first, second):
        raise ValueError(
            '`augment_fn` gave the same batch twice, so it is not random; augment_on="device" '
            "is for random work. Deterministic per-example work belongs in `preprocess_fn` "
            "(before the cache), deterministic batch work in `batch_fn`. "
            f"Received: augment_fn={fn!r}"
        )
    for output in (first, second):
        for tensor in tf.nest.flatten(output):
            values = tensor.numpy()
            if values.ndim and not (values == values[:1]).all():
                return
    raise ValueError(
        "`augment_fn` draws one random value for the whole batch (identical examples came out "
        "identical), so every example would get the same crop or flip; draw one value per "
        "example (shape [batch, ...]), e.g. with keras.layers.RandomFlip or "
        f"tf.random.uniform([batch_size, 1, 1, 1]). Received: augment_fn={fn!r}"
    )


def _dtypes(data: Any) -> Any:
    return tf.nest.map_structure(lambda t: tf.as_dtype(t.dtype).name, data)


def _first_line(error: Exception) -> str:
    """The error's first line without TensorFlow's ``{{function_node ...}}`` prefix."""
    text = re.sub(r"\{\{.*?\}\}\s*", "", str(error)).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _shapes(data: Any) -> str:
    def shape(value: Any) -> str:
        if hasattr(value, "dtype") and hasattr(value, "shape"):
            return f"{getattr(value.dtype, 'name', value.dtype)}{list(value.shape)}"
        return type(value).__name__

    return str(tf.nest.map_structure(shape, data))
