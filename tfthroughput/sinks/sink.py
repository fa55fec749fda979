"""The sink interface: where ``GPUMonitor`` hands each window's and each epoch's figures.

The monitor measures once and hands the same :class:`Measurement` to every sink: its own
TensorBoard event writer (always on: the Custom Scalars layout, the cluster summary and
``tfthroughput report`` read the event files) and each sink given as ``GPUMonitor(sinks=...)``.
A sink is any object with ``open``, ``write`` and ``close``; subclass :class:`Sink` to write only
``write``.

Threads: ``write`` is called from the training thread (an epoch's end), from Keras's callback
thread or the sampler thread (a window's end), one call at a time. It must return quickly, as
the training thread may be waiting: a sink that talks to a server queues the measurement and
sends it from a thread of its own (:class:`~tfthroughput.sinks.MLflowSink` does). An exception
from a sink is warned about once per ``fit`` and never stops training.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tfthroughput.hardware.window_stats import WindowStats

# Where a measurement is made by hand (a sink's own test): no samples.
_NO_STATS = WindowStats({}, start=0.0, end=0.0, buffer_samples={})


@dataclass(frozen=True)
class RunInfo:
    """The ``fit`` a sink is opened for.

    Attributes:
        run_dir: The monitor's TensorBoard run folder (``GPUMonitor.run_dir``).
        log_dir: The monitor's ``log_dir``.
        task: ``<task_type>_<index>`` (e.g. ``worker_1``) on a worker of a
            MultiWorkerMirroredStrategy cluster, else None.
        is_chief: Whether this process is the chief (always True outside a cluster).
        batch_size: Examples per step across every replica, if known.
        statistics: The statistics the monitor logs (``mean``, ``min``, ``max``, ``p95``).
    """

    run_dir: str
    log_dir: str
    task: str | None = None
    is_chief: bool = True
    batch_size: int | None = None
    statistics: tuple[str, ...] = ("mean", "min", "max", "p95")


@dataclass(frozen=True)
class Measurement:
    """One window's or one epoch's figures, as the monitor wrote them to TensorBoard.

    Attributes:
        kind: ``"window"`` (inside an epoch, with ``update_freq`` set) or ``"epoch"``.
        epoch: The epoch it belongs to.
        step: Optimizer steps completed when it ended: the global training step.
        steps: Optimizer steps taken in it, if known.
        seconds: Its wall time, if known (None for an epoch cut short).
        batch_size: Examples per step across every replica, if known: the mean over its
            steps where the monitor counted them (a short last batch makes it a fraction).
        scalars: Exactly the TensorBoard tags and values the monitor wrote for it, e.g.
            ``gpu0/utilization_percent/mean`` and ``epoch/examples_per_second`` for an epoch,
            ``window/gpu0/utilization_percent/mean`` for a window (tags and units: the
            README's tag table).
        figures: Its throughput figures without prefix: ``seconds``, ``steps_per_second``,
            ``examples_per_second``, ``joules_per_example``, each where known.
        stats: The statistics behind the scalars, per ``(source, metric)``.
        wait_percent: Share of its wall time the loop waited for its next batch
            (``input/wait_percent``), where measured.
    """

    kind: str
    epoch: int
    step: int
    steps: int | None
    seconds: float | None
    batch_size: float | None
    scalars: Mapping[str, float]
    figures: Mapping[str, float] = field(default_factory=dict)
    stats: WindowStats = field(default_factory=lambda: _NO_STATS)
    wait_percent: float | None = None

    @property
    def examples(self) -> int | None:
        """Examples trained on in it (``steps * batch_size``, a whole number), if both are
        known."""
        if self.steps is None or self.batch_size is None:
            return None
        return round(self.steps * self.batch_size)

    @property
    def tensorboard_step(self) -> int:
        """The step TensorBoard shows it at: the epoch for an epoch, the global step for a
        window."""
        return self.epoch if self.kind == "epoch" else self.step


class Sink:
    """Base class for a sink: override :meth:`write`, and :meth:`open` / :meth:`close` if the
    sink holds something live (a file, a thread, a server).

    Example:
        >>> class PrintSink(Sink):
        ...     def write(self, measurement):
        ...         rate = measurement.figures.get("examples_per_second")
        ...         print(measurement.kind, measurement.step, rate)
        >>> figures = {"examples_per_second": 16.0}
        >>> PrintSink().write(Measurement("epoch", 0, 4, 4, 2.0, 8, {}, figures))
        epoch 4 16.0
    """

    def open(self, run: RunInfo) -> None:
        """Called in ``on_train_begin`` of every ``fit``, before the first ``write``.

        Raise here (``ValueError``, ``ImportError``) for a misconfiguration the user can fix:
        the ``fit`` fails before its first step.
        """

    def write(self, measurement: Measurement) -> None:
        """Called once per window and per epoch; must return quickly."""
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the ``fit`` ends (or is left by an exception), after the last
        ``write``."""


def check_sinks(sinks: object) -> tuple:
    """Check ``GPUMonitor(sinks=...)``: a list or tuple of objects with ``open``, ``write`` and
    ``close``.

    Returns:
        The sinks as a tuple (empty for None).

    Raises:
        TypeError: If ``sinks`` is not a sequence of such objects.
    """
    if sinks is None:
        return ()
    if not isinstance(sinks, (list, tuple)):
        raise TypeError(
            "`sinks` must be a list of sinks (objects with open, write and close, e.g. "
            f"tfthroughput.sinks.MLflowSink()). Received: sinks={sinks!r}"
        )
    for sink in sinks:
        missing = [
            name for name in ("open", "write", "close") if not callable(getattr(sink, name, None))
        ]
        if missing:
            raise TypeError(
                f"Each of `sinks` needs methods open, write and close (subclass "
                f"tfthroughput.sinks.Sink); {sink!r} lacks {', '.join(missing)}. "
                f"Received: sinks={sinks!r}"
            )
    return tuple(sinks)
