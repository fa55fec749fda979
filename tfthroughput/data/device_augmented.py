"""``DeviceAugmented``: a Keras model that applies a pipeline's device work inside its steps.

A pipeline built with ``build_pipeline(..., augment_on="device")`` ships batches as they were
decoded (``uint8`` images) and leaves ``augment_fn`` and ``batch_fn`` to the training step
(see :mod:`tfthroughput.data.device_augmentation`). This wrapper is that step: it overrides
Keras's ``train_step`` (``augment_fn`` then ``batch_fn``), ``test_step`` and ``predict_step``
(``batch_fn`` only) and otherwise is the user's model, whose layers and weights it trains.
The wrapped model itself is never changed: save it, serve it, call ``predict`` on it as before;
random augmentation never runs outside ``fit``.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tfthroughput.data.device_augmentation import DeviceWork, device_work_of


class DeviceAugmented(keras.Model):
    """Train ``model`` on a pipeline built with ``augment_on="device"``, augmenting per batch.

    The training step runs the pipeline's ``augment_fn`` on the whole batch, then its
    ``batch_fn`` (the cast and normalisation), then Keras's own training step on the result;
    ``evaluate`` and ``predict`` run ``batch_fn`` only. Everything inside the step runs where
    the step runs: on the accelerator, compiled with it (``jit_compile`` as compiled).

    Compile and fit the wrapper; save and serve :attr:`model`, which holds the trained weights
    and never contains the augmentation. Needs the TensorFlow backend (the step is
    TensorFlow's ``train_step``). A model with its own ``train_step`` keeps it by calling
    ``device_work.train(data)`` (:func:`device_work_of` of the dataset) at its top instead.

    Args:
        model: The Keras model to train (built or not).
        dataset: The dataset exactly as ``build_pipeline(..., augment_on="device")`` returned
            it; its functions are found from it.
        **kwargs: Passed to ``keras.Model`` (e.g. ``name``).

    Attributes:
        model: The wrapped model.
        device_work: The pipeline's :class:`~tfthroughput.data.device_augmentation.DeviceWork`.

    Raises:
        TypeError: If ``model`` is not a ``keras.Model`` or ``dataset`` not a
            ``tf.data.Dataset``.
        ValueError: If ``dataset`` was not built with ``augment_on="device"``, or the Keras
            backend is not TensorFlow.

    Example:
        >>> flip = keras.layers.RandomFlip("horizontal")
        >>> ds = build_pipeline(  # doctest: +SKIP
        ...     (images_uint8, labels),
        ...     augment_fn=lambda x, y: (flip(x), y),
        ...     batch_fn=lambda x, y: (tf.cast(x, "float32") / 255.0, y),
        ...     augment_on="device",
        ...     batch_size=64,
        ... )
        >>> trainer = DeviceAugmented(model, ds)  # doctest: +SKIP
        >>> trainer.compile(optimizer="adam", loss="mse")  # doctest: +SKIP
        >>> trainer.fit(ds, epochs=10)  # doctest: +SKIP
        >>> model.save("model.keras")  # doctest: +SKIP
    """

    def __init__(self, model: keras.Model, dataset: tf.data.Dataset, **kwargs: Any) -> None:
        if not isinstance(model, keras.Model):
            raise TypeError(
                f"`model` must be a keras.Model. Received: model={model!r} "
                f"of type {type(model).__name__}"
            )
        work = device_work_of(dataset)
        if keras.backend.backend() != "tensorflow":
            raise ValueError(
                "DeviceAugmented runs the pipeline's functions in TensorFlow's train_step, so "
                "it needs KERAS_BACKEND=tensorflow; under another backend put Keras "
                "preprocessing layers at the top of the model instead. "
                f"Received: backend={keras.backend.backend()!r}"
            )
        super().__init__(**kwargs)
        self.model = model
        self.device_work: DeviceWork = work
        # Tracked, so that a Keras layer passed as a function keeps its random seed state
        # among the wrapper's variables (the wrapped model's own variables are left alone).
        self._device_layers = [
            fn for fn in (work.augment_fn, work.batch_fn) if isinstance(fn, keras.layers.Layer)
        ]

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        return self.model(inputs, training=training)

    def train_step(self, data: Any) -> Any:
        return super().train_step(self.device_work.train(data))

    def test_step(self, data: Any) -> Any:
        return super().test_step(self.device_work.infer(data))

    def predict_step(self, data: Any) -> Any:
        return super().predict_step(self.device_work.infer(data))
