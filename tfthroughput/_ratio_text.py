"""How every ratio the package prints is written: the figure, its interval and the words for
the interval, in one place (tune's table and lines, the CLI, the demo, the report).

A paired ratio (``tune``: each round times both sides back to back) is the median of the
rounds' ratios with its sign-test interval; an unpaired one (two runs' epochs, as the report
and the demo compare them) is the ratio of the medians with the range the epochs allow, and is
"within the noise" where the runs' epoch ranges overlap.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def ratio_text(ratio: float, low: float, high: float, words: str = "", *, unit: str = "x") -> str:
    """A ratio and its interval, ``"<ratio>x [<low>-<high>]"``, followed by ``(words)`` where
    given: the one way the package writes a ratio a user reads.

    Example:
        >>> ratio_text(1.66, 1.52, 1.89, paired_words(5, 0.9375))
        '1.66x [1.52-1.89] (median of 5 rounds, 94% interval)'
        >>> ratio_text(1.0, 1.0, 1.0, unit="")
        '1.00 [1.00-1.00]'
    """
    text = f"{ratio:.2f}{unit} [{low:.2f}-{high:.2f}]"
    return f"{text} ({words})" if words else text


def paired_words(rounds: int, coverage: float) -> str:
    """What a paired interval is: ``"median of 5 rounds, 94% interval"``."""
    return f"median of {rounds} rounds, {coverage:.0%} interval"


def unpaired_range(
    values: Sequence[float], baseline: Sequence[float]
) -> tuple[float, float, float, bool]:
    """The ratio of two runs' medians of a per-epoch figure (higher is faster), the lowest and
    highest ratio their epochs allow, and whether their epoch ranges overlap (the ratio is then
    within the noise).

    Example:
        >>> unpaired_range([300.0, 330.0], [100.0, 110.0])
        (3.0, 2.727272727272727, 3.3, False)
    """
    ratio = statistics.median(values) / statistics.median(baseline)
    low, high = min(values) / max(baseline), max(values) / min(baseline)
    overlap = min(values) <= max(baseline) and min(baseline) <= max(values)
    return ratio, low, high, overlap


def unpaired_words(epochs: int, overlap: bool) -> str:
    """What an unpaired range is: ``"range of 3 epochs each"``, and ``"within the noise"``
    where the runs' epochs overlap."""
    words = f"range of {epochs} epoch{'s' if epochs != 1 else ''} each"
    return words + ("; within the noise" if overlap else "")
