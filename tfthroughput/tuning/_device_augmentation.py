"""tune's knob that moves a CPU augmentation into the training step (TensorFlow only).

It applies to a dataset built by :func:`tfthroughput.build_pipeline` with a per-example
``augment_fn`` on the CPU, and is tried only where the input is the limit (the compute-only
probe's input-bound fraction at or above diagnose's threshold). The trial rebuilds the same
pipeline with ``augment_on="device"`` (the same ``augment_fn`` and ``batch_fn``, now run on
whole batches; ``build_pipeline``'s probe refuses a function that cannot, which leaves the knob
untried with its reason) and trains each fresh model inside
:class:`~tfthroughput.data.DeviceAugmented`, compiled as the user's model was. The random
stream changes, so the loss is checked at ``loss_tolerance``, as for precision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

from tfthroughput.tuning._arguments import ARRAYS
from tfthroughput.tuning._training_data import TrainingData


def device_dataset(data: TrainingData, batch_size: int | None) -> tuple[Any, str]:
    """The pipeline rebuilt with ``augment_on="device"`` (repeating), or ``None`` and why not
    (``""`` where the knob does not apply: no CPU augmentation of ``build_pipeline``'s)."""
    if data.kind == ARRAYS:
        return None, ""
    from tfthroughput.data.device_augmentation import rebuilt

    changes: dict[str, Any] = {"augment_on": "device", "repeat": True}
    if batch_size is not None:
        changes["batch_size"] = batch_size
    try:
        dataset = rebuilt(data.value, **changes)
    except (TypeError, ValueError) as error:
        return None, str(error).split(". Received:")[0]
    return dataset, ""


def device_builder(
    build_model: Callable[[], keras.Model], dataset: Any
) -> Callable[[], keras.Model]:
    """A model builder for the trial: the user's model in ``DeviceAugmented``, compiled alike."""
    from tfthroughput.data.device_augmented import DeviceAugmented

    def build() -> keras.Model:
        model = build_model()
        if not getattr(model, "compiled", False):
            return model  # refused by the runner's own model check, with its message
        trainer = DeviceAugmented(model, dataset)
        trainer.compile_from_config(model.get_compile_config())
        return trainer

    return build
