"""One training setup that :func:`tfthroughput.tune` can try: the knobs and how to apply them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class TuneSetup:
    """The knobs of one trial.

    Attributes:
        steps_per_execution: Training steps Keras runs per call of its compiled train function.
        jit_compile: Whether the train step is compiled with XLA.
        policy: Keras dtype policy name the model is built under, e.g. ``"float32"``.
        pipeline: Whether the input pipeline is rebuilt (parallel map, cache where
            deterministic, ``prefetch``); see ``docs/tuning.md``.
        batch_size: Examples per batch, or ``None`` for a dataset that is already batched.
        augment_on_device: Whether the pipeline's ``augment_fn`` runs per batch in the training
            step (``build_pipeline(..., augment_on="device")`` and ``DeviceAugmented``).
    """

    steps_per_execution: int
    jit_compile: bool
    policy: str
    pipeline: bool = False
    batch_size: int | None = None
    augment_on_device: bool = False

    def with_(self, **changes: Any) -> TuneSetup:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    def changes_from(self, baseline: TuneSetup) -> str:
        """The knobs that differ from ``baseline``, e.g. ``"steps_per_execution=32, XLA on"``;
        ``"as given"`` when none do."""
        parts = []
        if self.steps_per_execution != baseline.steps_per_execution:
            parts.append(f"steps_per_execution={self.steps_per_execution}")
        if self.jit_compile != baseline.jit_compile:
            parts.append("XLA on" if self.jit_compile else "XLA off")
        if self.policy != baseline.policy:
            parts.append(f"policy={self.policy}")
        if self.pipeline != baseline.pipeline:
            parts.append("pipeline rebuilt")
        if self.batch_size != baseline.batch_size:
            parts.append(f"batch_size={self.batch_size}")
        if self.augment_on_device != baseline.augment_on_device:
            parts.append("augmentation in the training step")
        return ", ".join(parts) or "as given"

    @property
    def compile_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``model.compile``: ``steps_per_execution`` and ``jit_compile``."""
        return {"steps_per_execution": self.steps_per_execution, "jit_compile": self.jit_compile}

    def apply(self, model: Any) -> Any:
        """Set ``steps_per_execution`` and ``jit_compile`` on a compiled model, in place.

        The model's compiled train, test and predict functions are dropped, so the next
        ``fit`` builds them with the new settings; loss, metrics and optimizer are kept. The
        dtype policy and the batch size cannot be changed on a built model: build it under
        :func:`tfthroughput.mixed_precision` and pass the batch size to ``fit``.

        Returns:
            ``model``.

        Raises:
            TypeError: If ``model`` is not a compiled ``keras.Model``.
        """
        import keras

        if not isinstance(model, keras.Model) or not getattr(model, "compiled", False):
            raise TypeError(f"`model` must be a compiled keras.Model. Received: model={model!r}")
        model.steps_per_execution = self.steps_per_execution
        model.jit_compile = self.jit_compile
        model.train_function = model.test_function = model.predict_function = None
        return model
