"""The order in which ``tune(..., mode="inference")`` tries the knobs of ``predict``.

1. The baseline: ``predict`` exactly as given (its batch size, default 32).
2. The batch size, doubling (free at inference: no learning dynamics), each measured
   with the same examples per timed run. The line stops at a failure (out of memory), at
   the first batch whose p95 latency exceeds ``max_batch_latency_ms``, at outputs beyond the
   tolerance, at the examples available or 128x the given batch, or after two doublings in
   a row that gain less than the noise floor (3 %) over the line's best.
3. XLA flipped (``jit_compile`` the other way), on the best setup so far.
4. ``steps_per_execution``, doubling from twice the model's own, on the best so far.
5. The dtype policy ``recommend_precision`` recommends, if it is not the one in force.

A trial is ``"faster"`` by the baseline's rule (its median ratio to the baseline beyond the
noise, most rounds won); it becomes the best setup only if its ratio also beats the best
so far by the noise floor (3 %), so a knob that gains nothing measurable is not added.

Each trial is measured against the baseline in alternated rounds (the tuning room's
``compare``); before each round both take a few single-batch latency samples. Its outputs are
compared with the baseline's, or, where it only adds ``steps_per_execution`` to the best setup
so far, exactly with that setup's.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from tfthroughput.tuning._arguments import ARRAYS, BATCHED
from tfthroughput.tuning._inference_trials import (
    _WARMUP_EXECUTIONS,
    LATENCY_SAMPLES,
    InferenceSettings,
    InferenceTrials,
)
from tfthroughput.tuning._knob_line import double_along
from tfthroughput.tuning._status import FAILED, OUTPUTS_DIFFER, OVER_LATENCY
from tfthroughput.tuning.confirmation import Confirmation, WholeRuns, confirm
from tfthroughput.tuning.inference_result import InferenceTuneResult
from tfthroughput.tuning.setup import TuneSetup

__all__ = ["InferenceSearch", "InferenceSettings"]

_MAX_BATCH_FACTOR = 128


class InferenceSearch(InferenceTrials):
    """One search; :meth:`run` returns the :class:`InferenceTuneResult`."""

    def run(self) -> InferenceTuneResult:
        self._measure_baseline()
        try:
            self._batch_line()
            if self._settings.try_xla:
                best = self._best[0]
                self._try(best.with_(jit_compile=not best.jit_compile))
            self._steps_per_execution_line()
            policy = self._settings.policy
            if policy is not None and policy != self._base_setup.policy:
                self._try(self._best[0].with_(policy=policy))
        finally:
            self._base.close()
        seconds = self._clock() - self._start  # the search's own: the confirmation has its own
        confirmation = self._confirm()
        chosen = self._best[0] if confirmation is None else confirmation.setup
        self._trials[0] = replace(
            self._trials[0],
            examples_per_second=statistics.median(self._baseline_speeds or [self._first_speed]),
            ratio=1.0,
            latency_p50_ms=self._base.latency_ms(0.5),
            latency_p95_ms=self._base.latency_ms(0.95),
        )
        return InferenceTuneResult(
            baseline=self._base_setup,
            chosen=chosen,
            trials=tuple(self._trials),
            seconds=seconds,
            time_budget=self._settings.time_budget,
            stopped_by_budget=self._stopped,
            max_batch_latency_ms=self._settings.max_batch_latency_ms,
            notes=tuple(self._notes + self._chosen_notes(chosen)),
            confirmation=confirmation,
        )

    def _confirm(self) -> Confirmation | None:
        """The search's pick against a rebuilt baseline by whole ``predict`` calls on the data
        as given (``tuning/confirmation.py``); ``None`` where nothing beat the baseline."""
        speed = statistics.median(self._baseline_speeds or [self._first_speed])
        candidates, most = self._to_confirm(speed, self._examples_per_run)
        if not candidates:
            return None
        size = self._base_setup.batch_size or 1
        most = most // size * size  # whole batches of the given size: the same examples each
        counted: list[int] = []

        def start(setup: TuneSetup) -> WholeRuns:
            spe = setup.steps_per_execution
            given = None if setup == self._base_setup else setup
            runner = self._runner(
                given,
                self._build_model,
                self._data,
                steps=2 * spe,
                warmup_steps=_WARMUP_EXECUTIONS * spe,
                seed=self._settings.seed,
                clock=self._clock,
            )
            runner.start()
            feed, _ = self._data.whole_feed(runner.setup.batch_size, most)
            _, examples = runner.whole_call(feed)  # the timed calls' warm-up
            counted.append(examples)
            return WholeRuns(runner, examples, run=lambda: runner.whole_call(feed)[0])

        whole = self._data.whole_feed(self._base_setup.batch_size, most)[1]
        confirmation = confirm(
            start,
            self._base_setup,
            candidates,
            rounds=self._settings.confirm_rounds,
            clock=self._clock,
            work="predict calls",
        )
        # Each side calls predict at its own batch size, so the work names the examples only.
        examples = f"{counted[0]:,} examples" if counted else "the data"
        total = "the data" if self._data.examples is None else f"{self._data.examples:,}"
        work = (
            f"whole predict calls on the data as given ({examples}, set-up included)"
            if whole
            else f"predict calls on the first {examples} of {total} (set-up included)"
        )
        return replace(confirmation, work=work)

    # ------------------------------------------------------------------------- the knobs

    def _batch_line(self) -> None:
        if self._data.kind == BATCHED:
            self._notes.append(
                "batch size not tried: the dataset is already batched (pass it unbatched, "
                "with batch_size, to let tune try larger batches)"
            )
            return
        given = self._data.batch_size
        bound = given * _MAX_BATCH_FACTOR
        if self._data.kind == ARRAYS and self._data.examples < bound:
            bound = self._data.examples
            self._notes.append(f"batch size bounded by the {bound} examples in the data")
        limit = self._settings.max_batch_latency_ms
        if limit is not None:
            self._base.sample_latency(LATENCY_SAMPLES)
            if self._base.latency_ms(0.95) > limit:
                self._notes.append(
                    f"batch size not raised: the given batch's p95 latency "
                    f"({self._base.latency_ms(0.95):.2f} ms) already exceeds the limit "
                    f"({limit:g} ms)"
                )
                return

        def ends(trial: Any) -> bool:
            if trial.status == OVER_LATENCY:
                self._notes.append(
                    f"batch size bounded by the latency limit: {trial.setup.batch_size} takes "
                    f"{trial.latency_p95_ms:.2f} ms per batch (p95), over {limit:g} ms"
                )
            return trial.status in (FAILED, OUTPUTS_DIFFER, OVER_LATENCY)

        double_along(
            given * 2, bound, lambda size: self._try(self._best[0].with_(batch_size=size)), ends
        )

    def _steps_per_execution_line(self) -> None:
        current = self._best[0]
        batches = self._timed_batches(current)
        bound = min(self._settings.max_steps_per_execution, max(1, batches // 2))
        spe = self._base_setup.steps_per_execution * 2
        double_along(
            spe,
            bound,
            lambda value: self._try(current.with_(steps_per_execution=value)),
            lambda trial: trial.status in (FAILED, OUTPUTS_DIFFER, OVER_LATENCY),
            line_best=self._best[1].ratio if self._best[1] else 1.0,
        )

    def _chosen_notes(self, chosen: TuneSetup) -> list[str]:
        notes = []
        if chosen.batch_size != self._base_setup.batch_size:
            notes.append(
                f"predict with batch_size={chosen.batch_size} (from "
                f"{self._base_setup.batch_size}): each batch waits for more examples, so a "
                "server that batches requests adds that wait to their latency"
            )
        if chosen.policy != self._base_setup.policy:
            notes.append(f"build the model under mixed_precision({chosen.policy!r})")
        return notes
