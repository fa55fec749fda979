"""diagnose's advice to move a CPU augmentation into the training step: the pipeline rebuilt
without augment_fn, timed alone on an injected clock, and when the advice is (not) given."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfthroughput.data.description import describe_pipeline
from tfthroughput.data.device_augmentation import without_augmentation
from tfthroughput.data.pipeline import build_pipeline
from tfthroughput.diagnosis.augmentation_advice import device_augmentation_advice

IMAGES = np.random.default_rng(0).integers(0, 256, (32, 8, 8, 3), dtype=np.uint8)
LABELS = np.arange(32) % 4


def _flip(image, label):
    return tf.image.random_flip_left_right(image), label


class TickClock:
    """Each reading is one second after the previous one."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1.0
        return self.now


def _advice(dataset, **kwargs):
    arguments = dict(
        verdict="input-bound",
        input_rate=0.1,
        compute_rate=5.0,
        steps=4,
        repeats=2,
        clock=TickClock(),
        accelerator=True,
    )
    return device_augmentation_advice(dataset, **{**arguments, **kwargs})


def _augmented():
    return build_pipeline((IMAGES, LABELS), augment_fn=_flip, cache=True, batch_size=8)


def test_the_rebuild_drops_only_the_augmentation():
    dataset = _augmented()
    assert describe_pipeline(dataset).transformations == ("cache", "map", "batch", "prefetch")
    plain = without_augmentation(dataset)
    assert describe_pipeline(plain).transformations == ("cache", "batch", "prefetch")
    # The images come back unflipped. The parallel batch is not deterministic here, so the
    # first batch handed over may be any of them.
    first = next(iter(plain))[0].numpy()
    batches = [IMAGES[start : start + 8] for start in range(0, len(IMAGES), 8)]
    assert any(np.array_equal(first, batch) for batch in batches)
    assert without_augmentation(plain) is None
    assert without_augmentation(build_pipeline((IMAGES, LABELS), batch_size=8)) is None


def test_the_advice_quotes_both_rates():
    # The tick clock reads 1 s apart: the start, the first batch and the last of 5 batches,
    # so the pipeline without the augmentation delivers 4 batches in 1 s.
    (advice,) = _advice(_augmented())
    assert advice.action == (
        'build_pipeline(..., augment_on="device") and DeviceAugmented(model, dataset)'
    )
    assert advice.reason.startswith(
        "the input pipeline alone delivers 0.1 batches/s with augment_fn on the CPU and 4.0 "
        "without it (40.0x), for a training step that takes 5.0: the per-example random work "
        "is the limit."
    )


def test_no_advice_where_it_does_not_apply():
    dataset = _augmented()
    assert _advice(dataset, accelerator=False) == ()
    assert _advice(dataset, verdict="compute-bound") == ()
    assert _advice(dataset, input_rate=6.0) == ()  # the input keeps up
    assert _advice(dataset, input_rate=3.5) == ()  # without it: 4.0, under 1.2x
    assert _advice(build_pipeline((IMAGES, LABELS), batch_size=8)) == ()
    device = build_pipeline(
        (IMAGES, LABELS),
        augment_fn=lambda x, y: (tf.image.random_flip_left_right(x), y),
        augment_on="device",
        batch_size=8,
    )
    assert _advice(device) == ()
