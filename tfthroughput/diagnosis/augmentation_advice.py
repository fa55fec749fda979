"""diagnose's advice to move a CPU-bound random augmentation into the training step.

Where the input is the limit and the pipeline was built by
:func:`tfthroughput.build_pipeline` with a per-example ``augment_fn`` on the CPU, diagnose
times the same pipeline rebuilt without that function, alone, as it timed the pipeline
itself. If the augmentation is what holds the input back (the pipeline without it delivers
clearly more batches/s), the advice is ``build_pipeline(..., augment_on="device")`` with
:class:`~tfthroughput.data.DeviceAugmented`, quoting both rates. Only with an accelerator:
on a CPU-only machine the step runs on the same cores and the batched augmentation costs more
CPU per example than the per-example one (``benchmarks/device_augmentation.py``), so the move
does not pay there.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import tensorflow as tf

from tfthroughput.data.benchmark import benchmark_dataset
from tfthroughput.data.device_augmentation import without_augmentation
from tfthroughput.diagnosis.recommendations import Recommendation
from tfthroughput.diagnosis.verdict import INPUT_BOUND

# The pipeline without the augmentation must deliver at least this much more for the
# augmentation to count as the limit; below it, the rest of the pipeline is.
CLEAR_GAIN = 1.2


def device_augmentation_advice(
    dataset: tf.data.Dataset,
    *,
    verdict: str,
    input_rate: float,
    compute_rate: float,
    steps: int,
    repeats: int,
    clock: Callable[[], float],
    accelerator: bool,
) -> tuple[Recommendation, ...]:
    """The advice, with its measurement, or ``()`` where it does not apply.

    Args:
        dataset: The dataset diagnose measured.
        verdict: diagnose's verdict; the advice is for ``"input-bound"`` only.
        input_rate: Its measured batches/s alone (with the augmentation).
        compute_rate: The training step's batches/s alone.
        steps: Batches per timed run, as diagnose times the pipeline.
        repeats: Timed runs (after one warm-up); the median is used.
        clock: Seconds-returning clock.
        accelerator: Whether the training step runs on an accelerator (a GPU TensorFlow sees).

    Returns:
        One :class:`~tfthroughput.diagnosis.recommendations.Recommendation`, or ``()``: no
        accelerator, the verdict is not input-bound, the dataset has no CPU augmentation
        (or could not be rebuilt), or the pipeline without it is not clearly faster.
    """
    if verdict != INPUT_BOUND or not accelerator or input_rate >= compute_rate:
        return ()
    try:
        plain = without_augmentation(dataset)
    except (ValueError, TypeError, tf.errors.OpError):
        return ()
    if plain is None:
        return ()
    rates = [
        benchmark_dataset(plain.repeat(), steps + 1, clock=clock).batches_per_second
        for _ in range(repeats + 1)
    ][1:]  # the first run warms up (fills a cache, a shuffle buffer)
    without = statistics.median(rates)
    if without < CLEAR_GAIN * input_rate:
        return ()
    return (
        Recommendation(
            'build_pipeline(..., augment_on="device") and DeviceAugmented(model, dataset)',
            f"the input pipeline alone delivers {input_rate:,.1f} batches/s with augment_fn on "
            f"the CPU and {without:,.1f} without it ({without / input_rate:.1f}x), for a "
            f"training step that takes {compute_rate:,.1f}: the per-example random work is the "
            "limit. Written for whole batches (one random draw per example), it runs in the "
            "training step on the accelerator, and the pipeline ships uint8 images.",
        ),
    )
