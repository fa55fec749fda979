"""What ``tune(..., mode="inference")`` returns: every trial, the chosen setup, how to use it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tfthroughput.tuning._result_base import ResultBase, TrialBase
from tfthroughput.tuning._table import TableWords
from tfthroughput.tuning.confirmation import Confirmation
from tfthroughput.tuning.output_check import OutputCheck
from tfthroughput.tuning.setup import TuneSetup  # noqa: F401 - the inherited fields name it

_WORDS = TableWords(
    "predict setting",
    "output_check",
    extra=(("p50 ms", "latency_p50_ms", "{:.2f}"), ("p95 ms", "latency_p95_ms", "{:.2f}")),
    search="inference search",
    unit="the baseline's examples/s",
    kept=" within the output tolerance",
)


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
        ratio_low: Lowest per-round ratio.
        ratio_high: Highest per-round ratio.
        noise: The baseline's and this setup's relative spreads in the same rounds, summed.
        rounds_won: Rounds in which it beat the baseline.
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

    _words: ClassVar[TableWords] = _WORDS
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
