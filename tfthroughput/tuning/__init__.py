"""Tuning: try the throughput fixes on the user's own model, keep the math, apply the winner.

``tune`` (also at the top level) measures ``steps_per_execution``, XLA, the dtype policy, the
input pipeline and, if allowed, the batch size on fresh copies of a model, against the model
as given (under a ``tf.distribute`` strategy where one is given or in scope: the result's
:class:`TuneDistribution`), and returns a :class:`TuneResult`.
``tune(..., mode="inference")`` tunes ``predict`` (batch size, XLA, ``steps_per_execution``,
policy) and returns an :class:`InferenceTuneResult`. ``autotune()`` (also at the top level)
tunes the next ``fit`` a running script or notebook makes and lets it run with the fastest
setup. Names resolve lazily (PEP 562).
"""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "Confirmation": "tfthroughput.tuning.engine.confirmation",
    "InferenceTrial": "tfthroughput.tuning.result",
    "InferenceTuneResult": "tfthroughput.tuning.result",
    "LossCheck": "tfthroughput.tuning.training.loss_check",
    "OutputCheck": "tfthroughput.tuning.inference.output_check",
    "TuneDistribution": "tfthroughput.tuning.training.distribution",
    "TuneResult": "tfthroughput.tuning.result",
    "TuneSetup": "tfthroughput.tuning.setup",
    "TuneTrial": "tfthroughput.tuning.result",
    "autotune": "tfthroughput.tuning.script.autotuning",
    "tune": "tfthroughput.tuning.tuner",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
