"""What :func:`tfthroughput.tune` returns: every trial, the chosen setup, and how to use it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tfthroughput.tuning._result_base import ResultBase, TrialBase
from tfthroughput.tuning._status import (  # noqa: F401 - the statuses, importable from here
    BASELINE,
    FAILED,
    FASTER,
    NOT_FASTER,
    PROBE,
    REJECTED,
    SLOWER,
)
from tfthroughput.tuning._table import TRAINING, TableWords
from tfthroughput.tuning.confirmation import Confirmation
from tfthroughput.tuning.distribution import TuneDistribution
from tfthroughput.tuning.loss_check import LossCheck
from tfthroughput.tuning.setup import TuneSetup  # noqa: F401 - the inherited fields name it


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
        ratio_low: Lowest per-round ratio.
        ratio_high: Highest per-round ratio.
        noise: The baseline's and this setup's relative spreads in the same rounds, summed.
        rounds_won: Rounds in which it beat the baseline.
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
