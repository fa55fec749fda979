"""A throughput gate for CI: the steady examples/s of each run under a new log folder against
the run of the same name under a baseline folder.

As asv's ``continuous`` does, a run fails only when it is slower beyond the noise *and* below
the threshold: the noise is each side's range over its steady epochs (every epoch after the
first when there are two or more), and ranges that overlap say nothing. A run present on one
side only, or without examples/s, is a finding of its own, never skipped in silence.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from tfthroughput.report.run_comparison import Run, compare_runs
from tfthroughput.report.steady_epochs import steady_epochs

THROUGHPUT_TAG = "epoch/examples_per_second"
# Exit codes: 0 passes; these say why not (2 is a usage error, as argparse's).
SLOWER_EXIT_CODE = 3
UNMATCHED_EXIT_CODE = 4


@dataclass(frozen=True)
class Throughput:
    """One run's steady examples/s: the median and range of its steady epochs."""

    median: float
    low: float
    high: float
    epochs: int

    def __str__(self) -> str:
        return f"{self.median:,.0f} examples/s [{self.low:,.0f}-{self.high:,.0f}]"


@dataclass(frozen=True)
class Finding:
    """What the gate found for one run name.

    Attributes:
        run: The run's name (``fit-1``).
        status: ``"faster"``, ``"within the noise"``, ``"slower"`` (beyond the noise, still at
            or above the threshold), ``"too slow"`` (fails the gate), ``"only in base"``,
            ``"only in new"``, or ``"no examples/s"``.
        base, new: Each side's figures, where it has them.
        ratio: New median over base median, where both exist.
    """

    run: str
    status: str
    base: Throughput | None
    new: Throughput | None
    ratio: float | None

    @property
    def failed(self) -> bool:
        return self.status == "too slow"

    @property
    def unmatched(self) -> bool:
        return self.status in ("only in base", "only in new", "no examples/s")

    def line(self) -> str:
        """The finding in one line, naming the run and both figures with their ranges."""
        if self.base is None or self.new is None:
            side = self.base or self.new
            return f"{self.run}: {self.status}" + (f" ({side})" if side else "")
        figures = f"{self.new} vs base {self.base}, {self.ratio:.2f}x"
        return f"{self.run}: {self.status}: {figures}"


@dataclass(frozen=True)
class GateResult:
    """Every finding, and the exit code they make."""

    base_dir: str
    new_dir: str
    fail_below: float
    findings: tuple[Finding, ...]

    @property
    def exit_code(self) -> int:
        """0 when nothing failed; :data:`SLOWER_EXIT_CODE` when a run is too slow (first, as
        the regression a gate exists for), else :data:`UNMATCHED_EXIT_CODE` when a run has no
        partner or no figures."""
        if any(finding.failed for finding in self.findings):
            return SLOWER_EXIT_CODE
        if any(finding.unmatched for finding in self.findings):
            return UNMATCHED_EXIT_CODE
        return 0

    def lines(self) -> list[str]:
        return [finding.line() for finding in self.findings]

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "exit_code": self.exit_code}, indent=2)


def check_fail_below(value: object) -> float:
    """``fail_below`` as a float in (0, 1], else ValueError naming the value."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not 0.0 < number <= 1.0:
        raise ValueError(f"--fail-below must be a ratio in (0, 1]. Received: {value!r}")
    return number


def throughput_gate(
    base_dir: str | os.PathLike, new_dir: str | os.PathLike, fail_below: float = 0.95
) -> GateResult:
    """Compare each run under ``new_dir`` with the run of the same name under ``base_dir``.

    Args:
        base_dir: The baseline's log folder.
        new_dir: The log folder of the runs under test.
        fail_below: A run fails when slower beyond the noise and its ratio is below this.
            Defaults to 0.95.

    Returns:
        One finding per run name, in the baseline's order, then runs only in ``new_dir``.

    Raises:
        ValueError: If ``fail_below`` is outside (0, 1], or a folder has no monitored run.
        FileNotFoundError, NotADirectoryError: If a folder is missing.
    """
    fail_below = check_fail_below(fail_below)
    base = {run.name: run for run in compare_runs(base_dir).runs}
    new = {run.name: run for run in compare_runs(new_dir).runs}
    names = [*base, *(name for name in new if name not in base)]
    findings = tuple(_finding(name, base.get(name), new.get(name), fail_below) for name in names)
    return GateResult(os.fspath(base_dir), os.fspath(new_dir), fail_below, findings)


def _throughput(run: Run) -> Throughput | None:
    values = list(steady_epochs([value for _, value in run.scalars.get(THROUGHPUT_TAG, ())]))
    if not values:
        return None
    values.sort()
    middle = len(values) // 2
    median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
    return Throughput(median, values[0], values[-1], len(values))


def _finding(name: str, base: Run | None, new: Run | None, fail_below: float) -> Finding:
    if base is None or new is None:
        side = base or new
        return Finding(name, "only in new" if base is None else "only in base", *_sides(side, base))
    before, after = _throughput(base), _throughput(new)
    if before is None or after is None or before.median <= 0:
        return Finding(name, "no examples/s", before, after, None)
    ratio = after.median / before.median
    if after.low <= before.high and before.low <= after.high:
        status = "within the noise"
    elif after.low > before.high:
        status = "faster"
    else:
        status = "too slow" if ratio < fail_below else "slower"
    return Finding(name, status, before, after, ratio)


def _sides(run: Run, base: Run | None) -> tuple:
    figures = _throughput(run)
    return (figures, None, None) if base is not None else (None, figures, None)
