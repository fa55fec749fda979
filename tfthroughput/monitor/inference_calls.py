"""``evaluate`` and ``predict`` calls outside ``fit``, each measured as a run of its own.

Batch inference has training's idle-GPU problems (small batches, slow input), so a
``GPUMonitor`` passed to ``model.evaluate`` or ``model.predict`` measures the call: it starts a
:class:`~tfthroughput.monitor.live_run.LiveRun` at ``on_test_begin`` or ``on_predict_begin`` and
measures the call as one epoch of batches, ended at ``on_test_end`` or ``on_predict_end``.

Where it shows in TensorBoard: each kind writes into a run of its own,
``<log_dir>/<run_name>/evaluate`` and ``<log_dir>/<run_name>/predict``, with every tag under
the call's name (``evaluate/examples_per_second``, ``predict/gpu0/utilization_percent/mean``),
so no chart mixes inference with training. Each call writes on at the end of the event file of
the call of its kind before it (:mod:`tfthroughput.monitor.event_files`), so a loop of calls
leaves one file, not one per call. A call's figures are written at ``step`` = the
number of such calls the monitor measured before it (0, 1, ...); its windows
(``evaluate/window/...``, with ``update_freq``) at ``step`` = batches of such calls completed
so far, continuing across calls as training windows continue across epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tfthroughput.monitor.live_run import LiveRun


class InferenceCalls:
    """The monitor's measured ``evaluate`` and ``predict`` calls: the one in progress, and how
    many calls and batches of each kind came before, and the event file each kind writes on
    (plain values, copied with the monitor).
    """

    def __init__(self) -> None:
        self.run: LiveRun | None = None
        self.counts: dict[str, tuple[int, int]] = {}  # phase -> (calls, batches) so far
        self.files: dict[str, str] = {}  # phase -> the event file of its last call

    def begin(
        self, phase: str, start_run: Callable[[str | None], LiveRun], steps: int | None
    ) -> None:
        """Start measuring a call.

        Args:
            phase: ``"evaluate"`` or ``"predict"``.
            start_run: Makes the call's run, its sampler not yet started, writing on at the end
                of the event file it is given (the last call's of this kind, or ``None``).
            steps: Keras's batches in the call, if known.
        """
        self.close()  # a call left by an exception, whose end hook never came
        run = start_run(self.files.get(phase))
        self.files[phase] = run.writer.path
        calls, batches = self.counts.get(phase, (0, 0))
        run.begin_epoch(calls, batches, steps)
        run.sampler.start()
        self.run = run

    def batch_end(self, batch: int) -> None:
        """After Keras's batch ``batch`` of the call: count it, end a window if due."""
        run = self.run
        if run is not None:
            run.batch_end(batch)

    def end(self, phase: str, params: Mapping[str, object] | None) -> None:
        """End the call: write its figures and statistics, stop sampling, close the writer."""
        run = self.run
        if run is None or run.phase != phase:
            return
        self.run = None
        calls, first_batch = self.counts.get(phase, (0, 0))
        batches = run.examples.settled(run.last_step - first_batch)
        run.last_step = min(run.last_step, first_batch + batches)  # the last window ends there
        if batches <= 0 and params:  # no batch hook came: Keras's own count, if it has one
            batches = int(params.get("steps") or 0)
        try:
            run.end_epoch(calls, batches or None)  # writes the call's statistics and figures
        finally:
            self.counts[phase] = (calls + 1, first_batch + max(batches, 0))
            run.sampler.stop()
            run.finish()

    def abandoned(self, run: LiveRun) -> None:
        """On the sampler thread, once the call has been left without its end hook."""
        run.finish()  # writes what the call sampled, without figures
        if self.run is run:
            self.run = None
            self._count(run)

    def close(self) -> None:
        """Stop the call in progress, if any, keeping what it sampled (a call left by an
        exception before its sampler noticed, or hooks driven by hand)."""
        run, self.run = self.run, None
        if run is not None:
            run.sampler.stop()  # joins the thread, so an abandon in progress ends first
            run.finish()
            self._count(run)

    def _count(self, run: LiveRun) -> None:
        """Count a call cut short, so the next call of its kind gets the next step."""
        phase = run.phase or ""
        calls, batches = self.counts.get(phase, (0, 0))
        self.counts[phase] = (calls + 1, max(batches, run.last_step))
