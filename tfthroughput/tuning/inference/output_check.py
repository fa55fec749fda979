"""Does an inference setup keep the model's answers? Its outputs against the baseline's.

Every trial of ``tune(..., mode="inference")`` builds the model from the same seed and predicts
the same examples; its outputs are compared with the baseline's, element by element. Knobs
that must not change the arithmetic (``steps_per_execution``: the same kernels on the same
batches) must match within :data:`EXACT_OUTPUT_TOLERANCE`; knobs that change it (XLA, the
dtype policy, and the batch size, whose kernels may sum in another order) are rejected beyond
the ``output_tolerance`` given to :func:`tfthroughput.tune`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# Relative difference allowed where the arithmetic must not change: float32 rounding, far
# below any real change of the computation.
EXACT_OUTPUT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class OutputCheck:
    """A candidate's ``predict`` outputs against the baseline's, on the same examples.

    Attributes:
        max_abs_difference: Largest ``|candidate - baseline|`` over every output element.
        max_rel_difference: ``max_abs_difference`` over the largest ``|baseline|`` element
            (relative to the outputs' scale, so that outputs near zero do not inflate it).
        same_arithmetic: Whether the candidate's knobs must leave the outputs unchanged.
        tolerance: Relative difference allowed (``EXACT_OUTPUT_TOLERANCE`` when
            ``same_arithmetic``, else the ``output_tolerance`` of the search).
        examples: Examples compared.
    """

    max_abs_difference: float
    max_rel_difference: float
    same_arithmetic: bool
    tolerance: float
    examples: int

    @property
    def passed(self) -> bool:
        """Whether the outputs are finite and within the tolerance."""
        return math.isfinite(self.max_rel_difference) and self.max_rel_difference <= self.tolerance

    def __str__(self) -> str:
        what = "same" if self.same_arithmetic else "changed"
        verdict = "ok" if self.passed else "DIFFER"
        return (
            f"{verdict}: {self.max_rel_difference:.1e} (max abs {self.max_abs_difference:.1e}, "
            f"{what} arithmetic, tolerance {self.tolerance:.0e})"
        )


def compare_outputs(
    baseline: Any, candidate: Any, *, same_arithmetic: bool, tolerance: float
) -> OutputCheck:
    """Compare two ``predict`` results (arrays, or the same structure of arrays).

    A structure or shape that differs, or a non-finite candidate output where the baseline's
    is finite, counts as an infinite difference.
    """
    import keras

    base_leaves = [np.asarray(v, dtype=np.float64) for v in keras.tree.flatten(baseline)]
    leaves = [np.asarray(v, dtype=np.float64) for v in keras.tree.flatten(candidate)]
    examples = int(base_leaves[0].shape[0]) if base_leaves and base_leaves[0].ndim else 0
    shapes_match = len(leaves) == len(base_leaves) and all(
        a.shape == b.shape for a, b in zip(leaves, base_leaves, strict=False)
    )
    if not shapes_match:
        return OutputCheck(math.inf, math.inf, same_arithmetic, tolerance, examples)
    largest, scale = 0.0, 0.0
    for base, value in zip(base_leaves, leaves, strict=True):
        if base.size == 0:
            continue
        finite = np.isfinite(base)
        if not np.all(np.isfinite(value[finite])):
            return OutputCheck(math.inf, math.inf, same_arithmetic, tolerance, examples)
        # Where the baseline itself is not finite, the candidate must match it exactly.
        if not np.array_equal(base[~finite], value[~finite], equal_nan=True):
            return OutputCheck(math.inf, math.inf, same_arithmetic, tolerance, examples)
        if finite.any():
            largest = max(largest, float(np.max(np.abs(value[finite] - base[finite]))))
            scale = max(scale, float(np.max(np.abs(base[finite]))))
    relative = largest / max(scale, 1e-12) if largest else 0.0
    return OutputCheck(largest, relative, same_arithmetic, tolerance, examples)
