"""What the training and the inference trial loops hold alike: the clock and the time budget,
the trials so far, the notes, the best setup, the baseline's speeds over the rounds, and the
size of the confirmation. Each mode's loop (``_trials``, ``_inference_trials``) adds how its
trials are built, timed and checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfthroughput.tuning._measure import Comparison, GPUWindows
from tfthroughput.tuning._trial_verdict import over_budget
from tfthroughput.tuning.confirmation import picks, run_examples
from tfthroughput.tuning.setup import TuneSetup


class TrialLoop:
    """The state every search keeps between its trials.

    Args:
        build_model: The user's builder (in the strategy's scope where there is one).
        data: The data, as the mode reads it.
        settings: The mode's search settings (``notes``, ``time_budget``, ``confirm_rounds``).
        clock: Seconds clock.
        gpu: GPU-Util windows over the candidates' runs.
    """

    def __init__(
        self,
        build_model: Callable[[], Any],
        data: Any,
        settings: Any,
        clock: Callable[[], float],
        gpu: GPUWindows,
    ) -> None:
        self._build_model, self._data, self._settings = build_model, data, settings
        self._clock, self._gpu = clock, gpu
        self._start = clock()
        self._costs: list[float] = []
        self._trials: list[Any] = []
        self._notes = list(settings.notes)
        self._stopped = False
        self._base_setup: TuneSetup | None = None
        self._best: tuple[TuneSetup, Comparison | None] | None = None
        self._baseline_speeds: list[float] = []

    def _out_of_time(self) -> bool:
        elapsed = self._clock() - self._start
        if over_budget(elapsed, self._costs, self._settings.time_budget):
            self._stopped = True
        return self._stopped

    def _to_confirm(
        self, base_speed: float, shortest: float
    ) -> tuple[list[tuple[TuneSetup, str]], float]:
        """The setups to confirm, best first (none where nothing beat the baseline or the
        confirmation is off), and the most examples one piece of its work may hold: its share
        of the search's time at ``base_speed``, never fewer than ``shortest`` (the search's
        own runs)."""
        rounds = self._settings.confirm_rounds
        candidates = picks(self._trials, self._best[0], self._base_setup) if rounds else []
        elapsed = self._clock() - self._start
        return candidates, max(run_examples(base_speed, elapsed, max(rounds, 1)), shortest)
