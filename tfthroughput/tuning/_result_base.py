"""What a training and an inference tuning result share: the leading fields of a trial and
of a result, the choice, the JSON, the printed table and the Text-tab record.

Only fields that lead in both classes live here, so a subclass's fields keep their order
(positional construction and ``vars()`` are unchanged). A mode's result class adds its
fields, its words (``_words``: the table's, ``_tag``: the Text tab's), its JSON values
(``_mode_dict``), ``apply`` and ``snippet``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from tfthroughput.tuning._table import TableWords, confirmed_figure, render
from tfthroughput.tuning.engine.verdict import BASELINE, FASTER
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
    rounds: int | None = None


@dataclass(frozen=True)
class ResultBase:
    """The fields every result starts with, the chosen trial and its speedup, and the result's
    JSON, table and Text-tab record. A subclass has ``notes`` and ``confirmation`` fields."""

    # The mode's table words (its check field among them) and the tag of its Text-tab record.
    _words: ClassVar[TableWords]
    _tag: ClassVar[str]

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
        if self.confirmation is not None:
            return self.confirmation.ratio
        return self.chosen_trial.ratio or 1.0

    @property
    def compile_kwargs(self) -> dict[str, Any]:
        """``model.compile`` keyword arguments of the chosen setup."""
        return self.chosen.compile_kwargs

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-able values."""
        confirmation = self.confirmation
        return {
            **self._leading_dict(),
            "compile_kwargs": self.compile_kwargs,
            **self._mode_dict(),
            "notes": list(self.notes),
            "trials": [trial_dict(t, self._words.check) for t in self.trials],
            "confirmation": None if confirmation is None else confirmation.to_dict(),
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=1, default=str)

    def __str__(self) -> str:
        return render(self, self._words)

    def write_to_tensorboard(self, log_dir: str) -> str:
        """Write the table to TensorBoard's Text tab (tag ``tune/result``, ``tune/inference``
        in inference mode, as a preformatted block, and its JSON under the tag with
        ``_json`` added) in a new event file in ``log_dir``.

        Returns:
            The event file's path.
        """
        from tfthroughput.monitor.text_entries import write_text

        block = "\n".join("    " + line for line in str(self).splitlines())  # Markdown code
        return write_text(log_dir, {self._tag: block, f"{self._tag}_json": self.to_json()})

    def _mode_dict(self) -> dict[str, Any]:
        """The mode's own JSON values, written after ``compile_kwargs``."""
        raise NotImplementedError

    def _snippet_start(self) -> list[str]:
        """The snippet's first lines in both modes: the confirmed figure, the policy to build
        under."""
        lines = []
        if self.confirmation is not None and self.improved:
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


def trial_dict(trial: Any, check: str) -> dict[str, Any]:
    """A trial as plain JSON-able values; ``check`` names its check field (``"loss_check"``,
    ``"output_check"``), written with its ``passed``."""
    values = {k: v for k, v in vars(trial).items() if k not in ("setup", check)}
    values["setup"] = vars(trial.setup)
    found = getattr(trial, check)
    if found is not None:
        values[check] = {**vars(found), "passed": found.passed}
    return values
