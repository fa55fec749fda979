"""Does a candidate keep the baseline's arithmetic? The losses of the warm-up, compared.

Every trial starts from the same seed (so the same initial weights and random draws) and
warms up on the baseline's batches, taken once from the input and replayed (``training.replay``), so
the mean training loss of its warm-up is comparable with the baseline's. Knobs that must not
change the arithmetic (``steps_per_execution``, a rebuilt pipeline that keeps the order) must
match it within :data:`EXACT_TOLERANCE`, or, where the knob changes the random stream itself,
within a tolerance measured from the input's own pass-to-pass variation; knobs that change it
(XLA, the dtype policy, the batch size) are rejected when the difference exceeds the
``loss_tolerance`` given to :func:`tfthroughput.tune`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

# Relative difference allowed where the arithmetic must not change: float32 rounding noise of
# the loss's mean, far below any real change of the computation.
EXACT_TOLERANCE = 1e-5

# How the two losses were made comparable (the table's loss-check column says it).
REPLAYED = "replayed"  # the same batches replayed to both, the same seeds
OWN_PASS = "own pass"  # the candidate read its own pass of the input (a rebuilt pipeline, ...)
MEASURED = "measured"  # tolerance measured from the input's own pass-to-pass variation


@dataclass(frozen=True)
class LossCheck:
    """The loss after the same examples, for the baseline and a candidate.

    Attributes:
        baseline_loss: Mean training loss of the baseline's warm-up epoch (where ``basis`` is
            ``"measured"``, the mean of it and of the baseline's on fresh passes of the input).
        loss: The candidate's, over the same examples.
        same_arithmetic: Whether the candidate's knobs must leave the arithmetic unchanged.
        tolerance: Relative difference allowed (``EXACT_TOLERANCE`` when
            ``same_arithmetic``, else the ``loss_tolerance`` of the search; where ``basis`` is
            ``"measured"``, measured from the input's pass-to-pass variation and never below
            ``loss_tolerance``).
        basis: ``"replayed"`` (both on the same batches, replayed, with the same seeds),
            ``"own pass"`` (the candidate read its own pass of the input) or ``"measured"``.
    """

    baseline_loss: float
    loss: float
    same_arithmetic: bool
    tolerance: float
    basis: str = REPLAYED

    @property
    def relative_difference(self) -> float:
        """``|loss - baseline_loss| / max(|baseline_loss|, 1e-12)``."""
        return abs(self.loss - self.baseline_loss) / max(abs(self.baseline_loss), 1e-12)

    @property
    def passed(self) -> bool:
        """Whether the difference is within the tolerance."""
        return math.isfinite(self.loss) and self.relative_difference <= self.tolerance

    def __str__(self) -> str:
        what = "same" if self.same_arithmetic else "changed"
        verdict = "ok" if self.passed else "DIVERGES"
        return (
            f"{verdict}: {self.relative_difference:.1e} {self.basis} ({what} arithmetic, "
            f"tolerance {self.tolerance:.0e})"
        )


def reported_loss(logs: Mapping[str, list]) -> tuple[float, str | None]:
    """The loss the model itself reports after a ``fit``, and a note when it is not ``loss``.

    A model with its own ``train_step`` returns what it likes: most return ``"loss"``; a GAN
    returns ``"d_loss"`` and ``"g_loss"``, a VAE ``"reconstruction_loss"`` beside ``"loss"``.
    Without a ``"loss"`` key, the first metric (in the order Keras logs them) whose name has
    ``loss`` in it stands in for it, else the first metric; the note says which.

    Args:
        logs: ``History.history`` of the ``fit``: each metric's values per epoch.

    Returns:
        The last epoch's value, and ``None`` or a sentence naming the metric compared.

    Raises:
        ValueError: If the model reported no metric at all.

    Example:
        >>> reported_loss({"accuracy": [0.5], "d_loss": [0.7], "g_loss": [1.2]})[0]
        0.7
    """
    if "loss" in logs:
        return float(logs["loss"][-1]), None
    names = [name for name, values in logs.items() if len(values)]
    if not names:
        raise ValueError(
            "The model's `train_step` reported no metric, so its loss cannot be compared: "
            f"return a dict with a `loss` entry. Received: logs={dict(logs)!r}"
        )
    name = next((n for n in names if "loss" in n), names[0])
    note = f"no `loss` in what the model reports: the loss check compares `{name}` instead"
    return float(logs[name][-1]), note
