"""What :func:`tfthroughput.tune` returns in either mode: every trial, the chosen setup, and how to
use it (:class:`TuneResult` for ``fit``, :class:`InferenceTuneResult` for ``predict``).

What the two share (the leading fields, the choice, the JSON, the table, the Text-tab record)
is ``_result_base``'s; each class here adds its mode's fields, words, ``apply`` and snippet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tfthroughput.tuning._result_base import ResultBase, TrialBase
from tfthroughput.tuning._table import INFERENCE, TRAINING, TableWords
from tfthroughput.tuning.engine.confirmation import Confirmation
from tfthroughput.tuning.engine.verdict import (  # noqa: F401 - the statuses, importable from here
    BASELINE,
    FAILED,
    FASTER,
    NOT_FASTER,
    PROBE,
    REJECTED,
    SLOWER,
)
from tfthroughput.tuning.inference.output_check import OutputCheck
from tfthroughput.tuning.setup import TuneSetup  # noqa: F401 - the inherited fields name it
from tfthroughput.tuning.training.distribution import TuneDistribution
from tfthroughput.tuning.training.loss_check import LossCheck


@dataclass(frozen=True)
class TuneTrial(TrialBase):
    """One measured setup.

    Attributes:
        setup: The knobs.
        label: What changed from the baseline, e.g. ``"steps_per_execution=32, XLA on"``.
        status: ``"baseline"``, ``"faster"``, ``"within noise"``, ``"slower"``,
            ``"loss diverges"``, ``"failed"`` or ``"probe"`` (the compute-only probe: the
            model fed one batch from memory, never chosen).
        examples_per_second: Median examples/s over the rounds; ``None`` when it failed.
        ratio: Median ratio to the baseline in the same rounds; ``None`` when it failed.
        ratio_low: Low end of the median ratio's sign-test interval (at least 90 % from 5
            rounds on; ``tuning/engine/paired.py``).
        ratio_high: Its high end.
        noise: The interval's half-width relative to the median.
        rounds_won: Rounds in which it beat the baseline.
        rounds: Alternated rounds timed (the paired rule adds rounds until it settles).
        warmup_seconds: Seconds of the warm-up (build, tracing, XLA compilation, one
            warm-up run), not timed in the examples/s.
        memory_mib: Peak memory the trial added, in MiB: GPU peak where the backend tells
            it, else the process's peak RSS over its start.
        gpu_utilization: Mean GPU-Util (%) over its timed runs, where a GPU was sampled.
        sm_activity: Mean SM activity (%) over its timed runs, where measured.
        loss_check: The warm-up loss against the baseline's; ``None`` for the baseline.
        reason: Why it failed, or notes on it.
    """

    warmup_seconds: float | None = None
    memory_mib: float | None = None
    gpu_utilization: float | None = None
    sm_activity: float | None = None
    loss_check: LossCheck | None = None
    reason: str = ""


@dataclass(frozen=True)
class TuneResult(ResultBase):
    """What :func:`tfthroughput.tune` found.

    Attributes:
        baseline: The setup as given.
        chosen: Of the setups that beat the baseline outside the noise and kept the loss,
            the one with the highest median ratio; ``baseline`` when none did.
        trials: Every trial, in the order run (the baseline first).
        seconds: Wall-clock seconds the search took.
        time_budget: The budget it had, in seconds.
        stopped_by_budget: Whether the budget ended the search before every knob was tried.
        pipeline_kwargs: Arguments for ``tfthroughput.build_pipeline(data, ...)`` when the
            chosen setup rebuilds the input pipeline; else ``None``.
        notes: What was not tried and why, and what the chosen setup changes, as sentences.
        distribution: The ``tf.distribute`` strategy the trials ran under, with the global and
            per-replica batch of the baseline and the chosen setup; ``None`` without one.
        confirmation: The search's pick and next-best against the baseline, timed by whole
            ``fit`` epochs (:class:`~tfthroughput.tuning.Confirmation`): it decides ``chosen``
            and gives ``speedup``; ``None`` where nothing beat the baseline in the search.
    """

    _words: ClassVar[TableWords] = TRAINING
    _tag: ClassVar[str] = "tune/result"

    trials: tuple[TuneTrial, ...]
    pipeline_kwargs: dict[str, Any] | None = None
    notes: tuple[str, ...] = field(default=())
    distribution: TuneDistribution | None = None
    confirmation: Confirmation | None = None

    def apply(self, model: Any) -> Any:
        """Set the chosen ``steps_per_execution`` and ``jit_compile`` on a compiled model.

        See :meth:`TuneSetup.apply`; the policy, the batch size and the pipeline are applied
        by building under :func:`tfthroughput.mixed_precision`, in ``fit`` and with
        :func:`tfthroughput.build_pipeline` (see :attr:`snippet`).
        """
        return self.chosen.apply(model)

    @property
    def snippet(self) -> str:
        """Python lines that apply the chosen setup, to paste into a training script."""
        chosen, lines = self.chosen, self._snippet_start()
        kwargs = ", ".join(f"{k}={v!r}" for k, v in self.compile_kwargs.items())
        compile_line = f"model.compile(..., {kwargs})"
        spe = chosen.steps_per_execution
        if spe > 1 and spe != self.baseline.steps_per_execution:
            compile_line += f"  # Keras runs whole executions: steps_per_epoch a multiple of {spe}"

        build = ["model = build_model()", compile_line]
        if self.distribution is not None:
            scope = f"with strategy.scope():  # the {self.distribution.strategy} tune ran under"
            build = [scope] + [f"    {line}" for line in build]
        lines += build
        data = "data"
        if self.pipeline_kwargs is not None:
            args = ", ".join(f"{k}={v!r}" for k, v in self.pipeline_kwargs.items())
            lines.append(f"dataset = tfthroughput.build_pipeline(data, {args})")
            data = "dataset"
        batch = ""
        if chosen.batch_size != self.baseline.batch_size and self.pipeline_kwargs is None:
            batch = f", batch_size={chosen.batch_size}"
        fit = f"model.fit({data}{batch}, ...)"
        if (self.pipeline_kwargs or {}).get("repeat"):  # an epoch would never end without it
            fit += "  # it repeats: give fit steps_per_epoch (your epoch's batches)"
        if batch and self.distribution is not None:
            fit += f"  # {self.distribution.batch(chosen.batch_size)}"
        lines.append(fit)
        return "\n".join(lines)

    def _mode_dict(self) -> dict[str, Any]:
        distribution = self.distribution
        return {
            "pipeline_kwargs": self.pipeline_kwargs,
            "distribution": None if distribution is None else distribution.to_dict(),
        }


@dataclass(frozen=True)
class InferenceTrial(TrialBase):
    """One measured ``predict`` setup.

    Attributes:
        setup: The knobs (``batch_size`` is the batch ``predict`` is called with).
        label: What changed from the baseline, e.g. ``"batch_size=256, XLA on"``.
        status: ``"baseline"``, ``"faster"``, ``"within noise"``, ``"slower"``,
            ``"outputs differ"``, ``"over latency limit"`` or ``"failed"``.
        examples_per_second: Median examples/s of its timed ``predict`` runs; ``None`` when
            it failed.
        ratio: Median ratio to the baseline in the same rounds.
        ratio_low: Low end of the median ratio's sign-test interval (at least 90 % from 5
            rounds on; ``tuning/engine/paired.py``).
        ratio_high: Its high end.
        noise: The interval's half-width relative to the median.
        rounds_won: Rounds in which it beat the baseline.
        rounds: Alternated rounds timed (the paired rule adds rounds until it settles).
        latency_p50_ms: Median milliseconds of one batch (one ``predict_on_batch`` call of
            ``batch_size`` examples, outputs back on the host).
        latency_p95_ms: 95th percentile of the same, in milliseconds.
        warmup_seconds: Seconds of the warm-up (build, tracing, XLA compilation), not timed.
        memory_mib: Peak device memory of the trial, in MiB, where the backend tells it (GPU),
            else ``None``.
        gpu_utilization: Mean GPU-Util (%) over its timed runs, where a GPU was sampled.
        sm_activity: Mean SM activity (%) over its timed runs, where measured.
        output_check: Its outputs against the baseline's; ``None`` for the baseline.
        reason: Why it failed or was rejected, or notes on it.
    """

    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    warmup_seconds: float | None = None
    memory_mib: float | None = None
    gpu_utilization: float | None = None
    sm_activity: float | None = None
    output_check: OutputCheck | None = None
    reason: str = ""


@dataclass(frozen=True)
class InferenceTuneResult(ResultBase):
    """What ``tune(..., mode="inference")`` found.

    Attributes:
        baseline: The setup as given.
        chosen: Of the setups that beat the baseline outside the noise, kept its outputs and
            stayed within the latency limit, the one with the highest median ratio;
            ``baseline`` when none did.
        trials: Every trial, in the order run (the baseline first).
        seconds: Wall-clock seconds the search took.
        time_budget: The budget it had, in seconds.
        stopped_by_budget: Whether the budget ended the search before every knob was tried.
        max_batch_latency_ms: The latency limit of one batch (p95, milliseconds), or ``None``.
        notes: What was not tried and why, and what the chosen setup changes, as sentences.
        confirmation: The search's pick and next-best against the baseline, timed by whole
            ``predict`` calls (:class:`~tfthroughput.tuning.Confirmation`): it decides
            ``chosen`` and gives ``speedup``; ``None`` where nothing beat the baseline in the
            search.
    """

    _words: ClassVar[TableWords] = INFERENCE
    _tag: ClassVar[str] = "tune/inference"

    trials: tuple[InferenceTrial, ...]
    max_batch_latency_ms: float | None = None
    notes: tuple[str, ...] = field(default=())
    confirmation: Confirmation | None = None

    @property
    def predict_kwargs(self) -> dict[str, Any]:
        """``model.predict`` keyword arguments: the chosen ``batch_size`` (empty for a dataset
        that is already batched)."""
        size = self.chosen.batch_size
        return {} if size is None else {"batch_size": size}

    def apply(self, model: Any) -> Any:
        """Set the chosen ``steps_per_execution`` and ``jit_compile`` on a model (compiled
        or not: ``predict`` needs no compile), in place, and drop its predict function so
        the next ``predict`` builds it with them. The batch size goes to ``predict``
        (:attr:`predict_kwargs`); the policy is chosen before building.

        Returns:
            ``model``.

        Raises:
            TypeError: If ``model`` is not a ``keras.Model``.
        """
        import keras

        if not isinstance(model, keras.Model):
            raise TypeError(f"`model` must be a keras.Model. Received: model={model!r}")
        model.steps_per_execution = self.chosen.steps_per_execution
        model.jit_compile = self.chosen.jit_compile
        model.predict_function = None
        return model

    @property
    def snippet(self) -> str:
        """Python lines that apply the chosen setup, with a note for a SavedModel."""
        chosen, lines = self.chosen, self._snippet_start()
        lines.append("model = build_model()")
        kwargs = ", ".join(f"{k}={v!r}" for k, v in self.compile_kwargs.items())
        lines.append(f"model.compile(..., {kwargs})  # or result.apply(model)")
        batch = "".join(f", {k}={v!r}" for k, v in self.predict_kwargs.items())
        lines.append(f"predictions = model.predict(x{batch})")
        size = chosen.batch_size if chosen.batch_size is not None else "the dataset's"
        lines.append(
            f"# SavedModel (model.export(path)): send batches of {size} examples; "
            "steps_per_execution and jit_compile are settings of Keras's predict loop, not "
            "saved with the model: set them again after loading"
        )
        return "\n".join(lines)

    def _mode_dict(self) -> dict[str, Any]:
        return {
            "mode": "inference",
            "max_batch_latency_ms": self.max_batch_latency_ms,
            "predict_kwargs": self.predict_kwargs,
        }
