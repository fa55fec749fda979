"""A run's Custom Scalars layout, written when the run first shows what it measures and again
whenever it shows more (a new source or metric, its first validation).

The layout itself is made in :mod:`tfthroughput.monitor.dashboard`; this keeps what the written
one shows, so a run writes it only when it would change.
"""

from __future__ import annotations

from collections.abc import Sequence

from tfthroughput.hardware.sampler import SampleKey
from tfthroughput.hardware.window_stats import WindowStats
from tfthroughput.monitor.dashboard import hardware_layout
from tfthroughput.monitor.event_writer import EventWriter


class RunLayout:
    """The layout of one run, as written so far.

    Args:
        writer: The run's event writer.
        statistics: The statistics the monitor logs.
        examples: Whether ``examples_per_second`` is logged.
        windows: Whether the monitor writes windows inside epochs.
        wait: Whether ``input/wait_percent`` is measured.
        phase: ``None`` for a ``fit``; ``"evaluate"`` or ``"predict"`` for such calls.
    """

    def __init__(
        self,
        writer: EventWriter,
        *,
        statistics: Sequence[str],
        examples: bool,
        windows: bool,
        phase: str | None,
        wait: bool = False,
    ) -> None:
        self._writer = writer
        self._statistics = statistics
        self._examples = examples
        self._windows = windows
        self._phase = phase
        self._wait = wait
        self._keys: frozenset[SampleKey] | None = None  # what the written layout shows
        self._totals: frozenset[SampleKey] = frozenset()
        self._validation = False  # whether the written layout shows validation

    def show(self, stats: WindowStats, force: bool = False, validation: bool = False) -> None:
        """Write the layout when ``stats`` show a source or metric not in it, or the run's
        first validation; ``force`` writes a first layout even without samples (an epoch's
        end), where a window without samples says nothing yet."""
        written = self._keys
        keys = (written or frozenset()) | frozenset(stats) | frozenset(stats.totals)
        self._totals |= frozenset(stats.totals)
        if keys == written and (self._validation or not validation):
            return
        self._validation |= validation
        if written is None and not keys and not force:
            return
        self._keys = keys
        layout = hardware_layout(
            keys,
            totals=self._totals,
            statistics=self._statistics,
            examples=self._examples,
            windows=self._windows,
            validation=self._validation,
            phase=self._phase,
            wait=self._wait,
        )
        self._writer.write_layout(layout)
