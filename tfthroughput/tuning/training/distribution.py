"""``tune`` under a ``tf.distribute`` strategy: every trial built in its scope, batches per replica.

Under ``MirroredStrategy`` the batch ``fit`` is given is the global batch: each of the
``num_replicas_in_sync`` replicas trains on its share, so a global batch that was comfortable
on one device can leave each replica launch-bound, and XLA and ``steps_per_execution`` act on
every replica's step and on the all-reduce between them. tune searches the same knobs; what
changes is where the models live: :func:`in_scope` wraps the user's builder so that every
trial's model (the baseline's too) is built, and so trained, under the strategy, and
:class:`TuneDistribution` tells the global and the per-replica batch of the baseline and of
the chosen setup.

The strategy is the one given to ``tune(strategy=...)``, else the one whose scope ``tune`` is
called in (``tf.distribute.has_strategy()``), else none. Strategies that span hosts
(``MultiWorkerMirroredStrategy``, parameter servers) and TPUs are refused: every worker would
have to take the same decisions from its own timings, in lockstep.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import keras

# Failures that only a strategy over several replicas brings, as TensorFlow words them -> why.
_REPLICA_FAILURES = (
    (
        "You must feed a value for placeholder tensor",
        "Keras's loop of steps_per_execution > 1 fails across replicas here "
        "(keras-team/keras#19246)",
    ),
    (
        "Trying to access resource",
        "XLA compiles all replicas' step as one program and cannot reach the variables on the "
        "other replicas' devices",
    ),
)
# A per-replica batch below Keras's default batch leaves each device's step short: the launch
# of the step, not its arithmetic, sets the pace.
SMALL_PER_REPLICA_BATCH = 32


@dataclass(frozen=True)
class TuneDistribution:
    """The strategy tune's trials ran under, and the batch each replica saw.

    Attributes:
        strategy: The strategy's class name, e.g. ``"MirroredStrategy"``.
        replicas: Replicas in sync: the global batch is split across them.
        devices: The replicas' devices, e.g. ``("/job:localhost/replica:0/task:0/device:GPU:0",
            ...)``.
        baseline_batch_size: The baseline's global batch (examples per optimizer step), or
            ``None`` where it cannot be told.
        chosen_batch_size: The chosen setup's global batch, or ``None``.

    Example:
        >>> d = TuneDistribution("MirroredStrategy", 2, ("/cpu:0", "/cpu:1"), 64, 128)
        >>> d.baseline_per_replica_batch_size, d.chosen_per_replica_batch_size
        (32, 64)
        >>> print(d)
        MirroredStrategy over 2 replicas: global batch 64 (32 per replica); chosen: global batch 128 (64 per replica)
    """  # noqa: E501

    strategy: str
    replicas: int
    devices: tuple[str, ...]
    baseline_batch_size: int | None
    chosen_batch_size: int | None

    @property
    def baseline_per_replica_batch_size(self) -> int | None:
        """Examples each replica trains on per step in the baseline (the largest share)."""
        return per_replica(self.baseline_batch_size, self.replicas)

    @property
    def chosen_per_replica_batch_size(self) -> int | None:
        """Examples each replica trains on per step in the chosen setup (the largest share)."""
        return per_replica(self.chosen_batch_size, self.replicas)

    def batch(self, global_batch: int | None) -> str:
        """``"global batch 64 (32 per replica)"``; ``"global batch unknown"`` for ``None``."""
        if global_batch is None:
            return "global batch unknown"
        share = per_replica(global_batch, self.replicas)
        even = global_batch % self.replicas == 0
        return f"global batch {global_batch} ({'' if even else 'up to '}{share} per replica)"

    def to_dict(self) -> dict[str, Any]:
        """The fields and both per-replica batches, as plain JSON-able values."""
        return {
            **vars(self),
            "devices": list(self.devices),
            "baseline_per_replica_batch_size": self.baseline_per_replica_batch_size,
            "chosen_per_replica_batch_size": self.chosen_per_replica_batch_size,
        }

    def __str__(self) -> str:
        replicas = "1 replica" if self.replicas == 1 else f"{self.replicas} replicas"
        text = f"{self.strategy} over {replicas}: "
        text += self.batch(self.baseline_batch_size)
        if self.chosen_batch_size != self.baseline_batch_size:
            text += f"; chosen: {self.batch(self.chosen_batch_size)}"
        return text


def per_replica(global_batch: int | None, replicas: int) -> int | None:
    """The largest replica's share of a global batch (MirroredStrategy splits it evenly, the
    first replicas taking one example more where it does not divide).

    Example:
        >>> per_replica(64, 2), per_replica(65, 2), per_replica(None, 2)
        (32, 33, None)
    """
    return None if global_batch is None else -(-global_batch // replicas)


def find_strategy(strategy: object) -> Any | None:
    """The strategy tune runs under: ``strategy`` if given, else the scope it is called in.

    Raises:
        ValueError: If a strategy is given but the Keras backend is not TensorFlow, or it spans
            several hosts or a TPU.
        TypeError: If ``strategy`` is not a ``tf.distribute.Strategy``.
    """
    tf = sys.modules.get("tensorflow")
    tensorflow_backend = keras.backend.backend() == "tensorflow"
    if strategy is None:
        if tf is None or not tensorflow_backend or not tf.distribute.has_strategy():
            return None
        strategy = tf.distribute.get_strategy()
    elif not tensorflow_backend:
        raise ValueError(
            "`strategy` needs Keras's TensorFlow backend (tf.distribute); Keras runs on "
            f"{keras.backend.backend()}. Received: strategy={strategy!r}"
        )
    if tf is None or not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(
            "`strategy` must be a tf.distribute.Strategy (e.g. tf.distribute.MirroredStrategy()) "
            f"or None. Received: strategy={strategy!r}"
        )
    if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
        return None  # the default strategy: one device, as without a strategy
    spanning = (
        tf.distribute.MultiWorkerMirroredStrategy,
        tf.distribute.experimental.ParameterServerStrategy,
        tf.distribute.TPUStrategy,
    )
    if isinstance(strategy, spanning):
        raise ValueError(
            f"tune cannot run under {type(strategy).__name__}: each worker would take its own "
            "decisions from its own timings. Tune on one host (MirroredStrategy over its "
            "devices), then train the cluster with the chosen setup. "
            f"Received: strategy={strategy!r}"
        )
    return strategy


def replica_failure(error: BaseException) -> str | None:
    """Why a trial failed, where the error is one only several replicas bring; else None.

    Example:
        >>> replica_failure(ValueError("Trying to access resource dense/kernel/replica_1"))[:12]
        'XLA compiles'
        >>> replica_failure(ValueError("out of memory")) is None
        True
    """
    text = str(error)
    for pattern, reason in _REPLICA_FAILURES:
        if pattern in text:
            return reason
    return None


def may_clear_session() -> bool:
    """Whether ``keras.backend.clear_session`` leaves the caller as it was: not inside a
    ``tf.distribute`` scope, whose strategy stack TensorFlow's ``reset_default_graph`` drops
    (the scope would be gone for the rest of the block, and leaving it would raise)."""
    tf = sys.modules.get("tensorflow")
    if tf is None or keras.backend.backend() != "tensorflow":
        return True
    return not tf.distribute.has_strategy()


def in_scope(build_model: Callable[[], keras.Model], strategy: Any | None) -> Callable:
    """``build_model``, building every model in ``strategy``'s scope (as it is without one)."""
    if strategy is None:
        return build_model

    @functools.wraps(build_model)
    def build() -> keras.Model:
        with strategy.scope():
            return build_model()

    return build


def describe(result: Any, strategy: Any | None, examples_per_step: Callable[[], int | None]):
    """``result`` with its :class:`TuneDistribution` and a note on small per-replica batches.

    Args:
        result: The search's :class:`~tfthroughput.tuning.TuneResult`.
        strategy: The strategy it ran under, or ``None`` (``result`` is returned as it is).
        examples_per_step: Tells the global batch of a setup whose ``batch_size`` is ``None``
            (a batched dataset).
    """
    if strategy is None:
        return result
    given = None

    def global_batch(setup) -> int | None:
        nonlocal given
        if setup.batch_size is not None:
            return setup.batch_size
        if given is None:
            given = examples_per_step()
        return given

    distribution = TuneDistribution(
        type(strategy).__name__,
        int(strategy.num_replicas_in_sync),
        tuple(str(device) for device in strategy.extended.worker_devices),
        global_batch(result.baseline),
        global_batch(result.chosen),
    )
    notes = list(result.notes)
    share = distribution.chosen_per_replica_batch_size
    batch_tried = any(t.setup.batch_size != result.baseline.batch_size for t in result.trials)
    small = share is not None and share < SMALL_PER_REPLICA_BATCH
    if distribution.replicas > 1 and small and not batch_tried:
        notes.append(
            f"each of the {distribution.replicas} replicas trains on {share} examples a step: "
            "a per-replica batch this small leaves every device launch-bound; a larger global "
            "batch (allow_batch_change=True) is the knob for that, and it changes the learning "
            "dynamics"
        )
    return replace(result, distribution=distribution, notes=tuple(notes))
