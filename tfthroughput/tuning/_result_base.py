"""What a training and an inference tuning result share: the leading fields of a trial and
of a result, the choice, and the JSON and Text-tab pieces both write.

Only fields that lead in both classes live here, so a subclass's fields keep their order
(positional construction, ``vars()`` and so the JSON keys are unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfthroughput.tuning._status import BASELINE, FASTER
from tfthroughput.tuning._table import confirmed_figure
from tfthroughput.tuning.setup import TuneSetup


@dataclass(frozen=True)
class TrialBase:
    """The fields every trial starts with (see ``TuneTrial`` and ``InferenceTrial``)."""

    setup: TuneSetup
    label: str
    status: str
    examples_per_second: float | None = None
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    noise: float | None = None
    rounds_won: int | None = None


@dataclass(frozen=True)
class ResultBase:
    """The fields every result starts with, and the chosen trial and its speedup."""

    baseline: TuneSetup
    chosen: TuneSetup
    trials: tuple[Any, ...]
    seconds: float
    time_budget: float
    stopped_by_budget: bool = False

    @property
    def improved(self) -> bool:
        """Whether a setup beat the baseline outside the noise."""
        return self.chosen != self.baseline

    @property
    def chosen_trial(self) -> Any:
        """The trial of the chosen setup."""
        wanted = FASTER if self.improved else BASELINE
        return max(
            (t for t in self.trials if t.setup == self.chosen and t.status == wanted),
            key=lambda t: t.ratio or 1.0,
        )

    @property
    def speedup(self) -> float:
        """Median ratio of the chosen setup to the baseline as the user runs it: the
        confirmation's (whole ``fit`` epochs or ``predict`` calls); the search's own where no
        confirmation ran; ``1.0`` for the baseline."""
        confirmation = getattr(self, "confirmation", None)
        if confirmation is not None:
            return confirmation.ratio
        return self.chosen_trial.ratio or 1.0

    @property
    def compile_kwargs(self) -> dict[str, Any]:
        """``model.compile`` keyword arguments of the chosen setup."""
        return self.chosen.compile_kwargs

    def _snippet_start(self) -> list[str]:
        """The snippet's first lines in both modes: the confirmed figure, the policy to build
        under."""
        lines = []
        if getattr(self, "confirmation", None) is not None and self.improved:
            lines.append(f"# {confirmed_figure(self.confirmation)}")
        if self.chosen.policy != self.baseline.policy:
            policy = self.chosen.policy
            lines.append(f"tfthroughput.mixed_precision({policy!r})  # before building")
        return lines

    def _leading_dict(self) -> dict[str, Any]:
        """The JSON values every result starts with, in the order both write them."""
        return {
            "baseline": vars(self.baseline),
            "chosen": vars(self.chosen),
            "speedup": self.speedup,
            "seconds": self.seconds,
            "time_budget": self.time_budget,
            "stopped_by_budget": self.stopped_by_budget,
        }

    def _write_text(self, log_dir: str, tag: str, json_text: str) -> str:
        """Write ``str(self)`` as a Markdown code block under ``tag`` and ``json_text`` under
        ``tag + "_json"`` to TensorBoard's Text tab; returns the event file's path."""
        from tfthroughput.monitor.text_entries import write_text

        block = "\n".join("    " + line for line in str(self).splitlines())  # Markdown code
        return write_text(log_dir, {tag: block, f"{tag}_json": json_text})


def trial_dict(trial: Any, check: str) -> dict[str, Any]:
    """A trial as plain JSON-able values; ``check`` names its check field (``"loss_check"``,
    ``"output_check"``), written with its ``passed``."""
    values = {k: v for k, v in vars(trial).items() if k not in ("setup", check)}
    values["setup"] = vars(trial.setup)
    found = getattr(trial, check)
    if found is not None:
        values[check] = {**vars(found), "passed": found.passed}
    return values
