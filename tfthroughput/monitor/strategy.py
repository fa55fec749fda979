"""Where a training stands in ``tf.distribute``, and how many examples one of its steps takes.

``GPUMonitor`` reads both at ``on_train_begin``. The placement says how many replicas and
workers train together and which worker this process is (its run folder, its part in the
cluster exchange). The global batch size (examples per step across every replica) makes
``epoch/examples_per_second`` right under a strategy without the user's help: Keras 3 gives
callbacks neither the data nor its adapter, so it is read from the ``fit`` call on the stack.
Keras's data adapter knows it for arrays and for datasets with a static batch dimension; for a
``tf.data`` pipeline batched without ``drop_remainder`` the ``batch`` transformation is found
by walking the pipeline back from its output.

Nothing here imports TensorFlow: a strategy exists only where the model was built with it, and
a ``tf.data.Dataset`` only where TensorFlow is already loaded.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field

from tfthroughput.hardware.source import MonitoringWarning
from tfthroughput.monitor.fit_watch import fit_locals

# Jobs whose tasks train under MultiWorkerMirroredStrategy, in TensorFlow's rank order.
_TRAINING_JOBS = ("chief", "worker")
# tf.data transformations a walk back from the output passes on its way to the `batch`: they
# keep each element's batch dimension (maps are assumed to, as a per-batch map does).
_KEEPS_BATCH = ("UnaryUnchangedStructureDataset", "_MapDataset", "_ParallelMapDataset")
_BATCHES = ("_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset")
_MAX_WALK = 64


@dataclass(frozen=True)
class Placement:
    """The training's place in a ``tf.distribute`` strategy.

    Attributes:
        replicas: Replicas training in sync (``strategy.num_replicas_in_sync``), all workers.
        worker_names: Every worker of a MultiWorkerMirroredStrategy cluster as
            ``<task_type>_<index>``, chief first (TensorFlow's rank order); empty otherwise.
        rank: This worker's position in ``worker_names``; 0 outside a cluster.
        is_chief: Whether this process writes what only one worker should (the cluster run).
        strategy: The strategy itself, for the cluster exchange; ``None`` without one.
    """

    replicas: int = 1
    worker_names: tuple[str, ...] = ()
    rank: int = 0
    is_chief: bool = True
    strategy: object = field(default=None, compare=False, repr=False)

    @property
    def multi_worker(self) -> bool:
        """Whether several worker processes train together (MultiWorkerMirroredStrategy)."""
        return len(self.worker_names) > 1

    @property
    def worker_name(self) -> str | None:
        """This worker's ``<task_type>_<index>``, e.g. ``"worker_1"``; ``None`` outside a
        cluster."""
        return self.worker_names[self.rank] if self.multi_worker else None


def find_placement(model: object) -> Placement:
    """The strategy ``model`` trains under, or the one in scope when there is no model.

    Args:
        model: The Keras model (its ``distribute_strategy``, TensorFlow backend), or ``None``
            for hooks driven by hand inside ``strategy.scope()``.

    Returns:
        A :class:`Placement`; the default one (one replica, no cluster) without a strategy.

    Example:
        >>> find_placement(None).replicas  # no strategy in scope
        1
    """
    strategy = getattr(model, "distribute_strategy", None) or _strategy_in_scope()
    if strategy is None:
        return Placement()
    replicas = int(getattr(strategy, "num_replicas_in_sync", 1))
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if resolver is None or task_type not in _TRAINING_JOBS:
        return Placement(replicas=replicas, strategy=strategy)
    jobs = resolver.cluster_spec().as_dict()
    names = tuple(
        f"{job}_{index}" for job in _TRAINING_JOBS for index in _task_indices(jobs.get(job))
    )
    me = f"{task_type}_{int(resolver.task_id)}"
    if len(names) <= 1 or me not in names:
        return Placement(replicas=replicas, strategy=strategy)
    return Placement(
        replicas=replicas,
        worker_names=names,
        rank=names.index(me),
        is_chief=bool(strategy.extended.should_checkpoint),
        strategy=strategy,
    )


def global_batch_size(given: int | None, *, in_fit: bool) -> int | None:
    """Examples per step across every replica: ``given`` if set, else read from ``fit``.

    Warns once (:class:`MonitoringWarning`) when a ``fit`` is running and its batch size cannot
    be read (a generator, a ``PyDataset``, a pipeline whose batch size is a tensor), and when
    ``given`` differs from what the ``fit`` feeds (``given`` is kept).

    Args:
        given: The monitor's ``batch_size`` argument.
        in_fit: Whether a Keras ``fit`` drives the monitor (hooks driven by hand have no data
            to read).

    Returns:
        The global batch size, or ``None`` when unknown.
    """
    detected = fit_batch_size() if in_fit else None
    if given is not None:
        if detected is not None and detected != given:
            warnings.warn(
                f"GPUMonitor was given batch_size={given}, but each step of this fit takes "
                f"{detected} examples (the global batch, across every replica); "
                f"epoch/examples_per_second uses {given} as given.",
                MonitoringWarning,
                stacklevel=3,
            )
        return given
    if detected is None and in_fit:
        warnings.warn(
            "GPUMonitor cannot tell how many examples each step of this fit takes (the data "
            "is not an array or a tf.data pipeline with a constant batch size), so "
            "epoch/examples_per_second is not logged: pass `batch_size=` (examples per step "
            "across every replica).",
            MonitoringWarning,
            stacklevel=3,
        )
    return detected


def call_batch_size(method: str, given: int | None) -> int | None:
    """Examples per batch of the innermost Keras ``evaluate`` or ``predict`` on the calling
    thread's stack (an epoch's validation runs one), read as :func:`fit_batch_size` reads
    ``fit``'s; ``given`` (the monitor's ``batch_size``) where it cannot be read. No warning:
    a validation or inference figure without examples still has its steps per second."""
    detected = fit_batch_size(method)
    return given if detected is None else detected


def fit_batch_size(method: str = "fit") -> int | None:
    """The global batch size of the Keras ``fit`` (or ``method``) on the calling thread's
    stack, if it can be read: from Keras's data adapter, else from the ``tf.data`` pipeline
    passed as ``x``."""
    found = fit_locals("epoch_iterator", "x", method=method)
    adapter = getattr(found.get("epoch_iterator"), "data_adapter", None)
    try:
        size = _positive_int(getattr(adapter, "batch_size", None))
        return size if size is not None else dataset_batch_size(found.get("x"))
    except Exception:  # noqa: BLE001 - data that cannot tell must not stop training
        return None


def dataset_batch_size(dataset: object) -> int | None:
    """The batch size of a batched ``tf.data.Dataset``, or ``None`` if it cannot be told.

    A static batch dimension (``drop_remainder=True``) is read from ``element_spec``; otherwise
    the pipeline is walked back from its output through transformations that keep the batch
    dimension (``map``, ``prefetch``, ``cache``, ``shuffle``, ``repeat``, ``take``, options,
    ...) to its ``batch`` or ``padded_batch``, whose size must be a constant.

    Example:
        >>> dataset_batch_size(tf.data.Dataset.range(10).batch(4).prefetch(1))  # doctest: +SKIP
        4
    """
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(dataset, tf.data.Dataset):
        return None
    leading = [spec.shape[0] if spec.shape.rank else None for spec in _specs(tf, dataset)]
    if leading and leading[0] is not None and all(size == leading[0] for size in leading):
        return _positive_int(leading[0])
    for _ in range(_MAX_WALK):
        kinds = {cls.__name__ for cls in type(dataset).__mro__}
        if kinds & set(_BATCHES):
            size = getattr(dataset, "_batch_size", None)
            return None if size is None else _positive_int(tf.get_static_value(size))
        if not kinds & set(_KEEPS_BATCH):
            return None
        dataset = getattr(dataset, "_input_dataset", None)
    return None


def _task_indices(tasks: object) -> list[int]:
    """Task indices of one job of a cluster spec: a list of addresses, or ``{index: address}``
    when sparse."""
    if isinstance(tasks, dict):
        return sorted(int(index) for index in tasks)
    return list(range(len(tasks or ())))


def _specs(tf, dataset) -> list:
    return [spec for spec in tf.nest.flatten(dataset.element_spec) if hasattr(spec, "shape")]


def _positive_int(value: object) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _strategy_in_scope() -> object | None:
    tf = sys.modules.get("tensorflow")
    if tf is None or not tf.distribute.has_strategy():
        return None
    return tf.distribute.get_strategy()
