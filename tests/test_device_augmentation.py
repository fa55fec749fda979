"""build_pipeline(augment_on="device"): what leaves the pipeline, the bytes it ships, and the
build-time checks of the functions moved to the training step."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.data.description import describe_pipeline
from tfthroughput.data.device_augmentation import PROBE_EXAMPLES, device_work_of
from tfthroughput.data.pipeline import build_pipeline

RNG = np.random.default_rng(0)
IMAGES = RNG.integers(0, 256, (64, 8, 8, 3), dtype=np.uint8)
LABELS = RNG.integers(0, 4, 64)


def _brighten(images, labels):
    """Per-example random brightness on a batch: one draw per image."""
    shift = tf.random.uniform([tf.shape(images)[0], 1, 1, 1], 0.0, 10.0)
    return tf.cast(images, tf.float32) + shift, labels


def _normalise(images, labels):
    return tf.cast(images, tf.float32) / 255.0, labels


def _device_pipeline(**kwargs):
    arguments = dict(augment_fn=_brighten, batch_fn=_normalise, augment_on="device", batch_size=16)
    return build_pipeline((IMAGES, LABELS), **{**arguments, **kwargs})


def test_the_functions_leave_the_pipeline_and_uint8_ships():
    # deterministic: the parallel batch may otherwise hand over a later batch first.
    dataset = _device_pipeline(deterministic=True)
    description = describe_pipeline(dataset)
    assert description.transformations == ("batch", "prefetch")
    assert dataset.element_spec[0].dtype == tf.uint8
    first_batch, _ = next(iter(dataset))
    np.testing.assert_array_equal(first_batch.numpy(), IMAGES[:16])
    assert description.device_functions == ("augment_fn", "batch_fn")
    work = device_work_of(dataset)
    assert (work.augment_fn, work.batch_fn) == (_brighten, _normalise)
    assert work.model_spec[0] == tf.TensorSpec([None, 8, 8, 3], tf.float32)


def test_bytes_per_batch_before_and_after_the_device_work():
    description = describe_pipeline(_device_pipeline())
    # 16 images of 8*8*3 values, 1 byte each as uint8 and 4 as float32, plus 16 int64 labels.
    assert description.bytes_per_batch == 16 * 192 + 16 * 8
    assert description.model_bytes_per_batch == 16 * 192 * 4 + 16 * 8
    text = str(description)
    assert "in the training step (augment_on='device', applied by DeviceAugmented): " in text
    assert "augment_fn, then batch_fn; batch_fn in evaluate and predict too" in text
    assert "bytes per batch, host to device: 3.1 KiB; after the device work" in text
    cpu = describe_pipeline(build_pipeline((IMAGES, LABELS), batch_fn=_normalise, batch_size=16))
    assert cpu.bytes_per_batch == description.model_bytes_per_batch
    assert (cpu.device_functions, cpu.model_bytes_per_batch) == ((), None)


def test_the_cpu_default_keeps_both_maps():
    dataset = build_pipeline((IMAGES, LABELS), augment_fn=_brighten, batch_fn=_normalise)
    assert describe_pipeline(dataset).transformations == ("map", "batch", "map", "prefetch")
    with pytest.raises(ValueError, match="no work for the training step"):
        device_work_of(dataset)


def test_the_train_work_draws_per_example_and_per_call():
    work = device_work_of(_device_pipeline())
    same = np.repeat(IMAGES[:1], 8, axis=0)
    batch = (tf.constant(same), tf.constant(LABELS[:8]))
    first, second = work.train(batch)[0].numpy(), work.train(batch)[0].numpy()
    assert len(np.unique(first[:, 0, 0, 0])) == 8  # identical images, eight different draws
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(work.infer(batch)[0].numpy(), same / np.float32(255))


def _error(**kwargs):
    with pytest.raises((ValueError, TypeError)) as caught:
        _device_pipeline(**kwargs)
    message = str(caught.value)
    assert "\n" not in message and "Received: " in message
    return message


def test_a_non_random_augment_fn_is_refused():
    message = _error(augment_fn=_normalise)
    assert message.startswith("`augment_fn` gave the same batch twice, so it is not random")


def _random_brightness():
    return lambda x, y: (tf.image.random_brightness(tf.cast(x, tf.float32), 0.3), y)


def _keras_random_crop():
    crop = keras.layers.RandomCrop(4, 4)  # one crop offset per batch
    return lambda x, y: (crop(x), y)


@pytest.mark.parametrize("make", [_random_brightness, _keras_random_crop])
def test_one_draw_for_the_whole_batch_is_refused(make):
    message = _error(augment_fn=make())
    assert message.startswith("`augment_fn` draws one random value for the whole batch")


def test_a_function_that_cannot_run_on_batches_is_refused():
    message = _error(augment_fn=lambda x, y: (tf.image.random_crop(x, [4, 4, 3]), y))
    assert message.startswith('`augment_fn` cannot run on batches, as augment_on="device" needs')
    assert f"on a batch of ('uint8[{PROBE_EXAMPLES}, 8, 8, 3]', 'int64[{PROBE_EXAMPLES}]')" in (
        message
    )
    assert "function_node" not in message
    message = _error(batch_fn=lambda x: x)
    assert message.startswith("`batch_fn` cannot run on batches")


def test_structure_and_none_returns_are_refused():
    assert _error(augment_fn=lambda x, y: _brighten(x, y)[0]).startswith(
        "`augment_fn` must return the same structure it receives"
    )
    assert _error(augment_fn=lambda x, y: None).startswith("`augment_fn` must return a tensor")


def test_a_keras_layer_with_per_example_draws_is_accepted():
    flip = keras.layers.RandomFlip("horizontal")
    dataset = _device_pipeline(augment_fn=lambda x, y: (flip(x), y))
    assert describe_pipeline(dataset).device_functions == ("augment_fn", "batch_fn")


def test_augment_on_arguments_are_checked():
    assert _error(augment_on="gpu") == (
        '`augment_on` must be "cpu" or "device". Received: augment_on=\'gpu\''
    )
    assert _error(batch_size=None, batch_fn=None).startswith(
        '`augment_on="device"` runs the work on whole'
    )
    assert "neither was given" in _error(augment_fn=None, batch_fn=None)
    assert _error(augment_on=True).endswith("Received: augment_on=True")
    with pytest.raises(TypeError, match="Received: dataset=3"):
        device_work_of(3)


def test_a_random_function_that_repeats_itself_once_is_still_random():
    # Few outcomes (a small crop on small images) can give the same batch twice in a row.
    draws = iter([0.0, 0.0, 0.0, 0.1])

    def repeats_then_varies(images, labels):
        per_example = tf.range(tf.cast(tf.shape(images)[0], tf.float32))[:, None, None, None]
        return tf.cast(images, tf.float32) * 0 + per_example + next(draws, 0.2), labels

    _device_pipeline(augment_fn=repeats_then_varies)
