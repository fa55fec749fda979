"""Hand a pipeline's per-example work to the tf.data service, at the right place, without hangs.

:func:`tfthroughput.build_pipeline` takes ``service=`` (a dispatcher address or a
:class:`DataService`) and inserts ``tf.data.experimental.service.distribute`` after the work that
should leave the trainer (read, ``preprocess_fn``, ``cache``, ``shuffle``, ``repeat``,
``augment_fn``) and always before the final ``prefetch``, which stays on the trainer:

- ``parallel_epochs``, or ``distributed_epoch`` with ``repeat=True``: after ``batch`` and
  ``batch_fn``, so the workers batch too and each transfer carries a whole batch;
- ``distributed_epoch`` with finite epochs: before ``batch``. Each worker gets a share of every
  epoch, and batching there would end each worker's share with its own partial batch (or drop
  it with ``drop_remainder``), so the trainer batches.

TensorFlow's client retries without a deadline: registering a dataset with a dead dispatcher, or
starting an iteration when the dispatcher is gone or has no worker, waits forever. So the stage
asks the dispatcher first (:func:`~tfthroughput.data.dispatcher.dispatcher_workers`, a gRPC call
with a deadline) when the pipeline is built and again when each iteration starts, and raises
``DataServiceUnavailable`` after ``DataService.timeout`` seconds (30 by default).
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from tfthroughput.data.description import PipelineStage
from tfthroughput.data.dispatcher import (
    DEFAULT_TIMEOUT,
    check_timeout,
    dispatcher_host_port,
    dispatcher_workers,
)

PROCESSING_MODES = ("distributed_epoch", "parallel_epochs")


@dataclass(frozen=True)
class DataService:
    """Where and how :func:`tfthroughput.build_pipeline` hands work to a tf.data service.

    Attributes:
        address: The dispatcher, ``"grpc://host:port"`` or ``"host:port"`` (e.g. what
            ``tfthroughput service`` prints).
        processing_mode: ``"distributed_epoch"`` (default): the dispatcher splits each epoch
            between the workers, so every example is seen once per epoch, as without the
            service; needs a splittable source (in-memory data, files, ``Dataset.range`` or
            ``from_tensor_slices``; other sources are produced in full by every worker).
            ``"parallel_epochs"``: every worker produces whole epochs on its own, so N workers
            yield N times the examples (use ``repeat=True`` and ``steps_per_epoch``).
        job_name: Shares one job between trainers that read the same pipeline (e.g. the workers
            of a ``MultiWorkerMirroredStrategy``); ``None`` (default): each iteration has its own.
        timeout: Seconds to wait for the dispatcher and at least one worker, when the pipeline
            is built and when each iteration starts, before :class:`DataServiceUnavailable`.
            Defaults to 30.

    Raises:
        TypeError: If an attribute has the wrong type.
        ValueError: If ``address`` is not ``[grpc://]host:port``, ``processing_mode`` is unknown,
            ``job_name`` is empty, or ``timeout`` is not a positive number.

    Example:
        >>> service = DataService("grpc://localhost:5050", processing_mode="parallel_epochs")
        >>> service.processing_mode
        'parallel_epochs'
        >>> ds = build_pipeline(  # doctest: +SKIP
        ...     images, preprocess_fn=decode, repeat=True, service=service
        ... )
    """

    address: str
    processing_mode: str = "distributed_epoch"
    job_name: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        dispatcher_host_port(self.address)
        if self.processing_mode not in PROCESSING_MODES:
            raise ValueError(
                f"`processing_mode` must be one of {PROCESSING_MODES}. "
                f"Received: processing_mode={self.processing_mode!r}"
            )
        if self.job_name is not None and not isinstance(self.job_name, str):
            raise TypeError(f"`job_name` must be a string or None. Received: {self.job_name!r}")
        if self.job_name == "":
            raise ValueError("`job_name` must not be empty; pass None for no name. Received: ''")
        check_timeout(self.timeout)

    @property
    def target(self) -> str:
        """The dispatcher as ``"grpc://host:port"``, the form TensorFlow takes."""
        return f"grpc://{dispatcher_host_port(self.address)}"


# ---------------------------------------------------------------------------------------------
# build_pipeline's service stage


@dataclass(frozen=True)
class ServiceStage:
    """What :func:`tfthroughput.build_pipeline` does with ``service=``: checked, then placed.

    Built by :func:`plan_service_stage` from the builder's arguments; ``apply`` is called at the
    two places the stage may go and acts at the one that fits (or nowhere without a service).
    """

    service: DataService | None = None
    before_batch: bool = False

    def apply(
        self, dataset: tf.data.Dataset, stages: list[PipelineStage], *, before_batch: bool
    ) -> tf.data.Dataset:
        """Insert the stage here if this is its place; else return ``dataset`` unchanged."""
        if self.service is None or before_batch != self.before_batch:
            return dataset
        service = self.service
        dispatcher_workers(service.target, timeout=service.timeout)  # registering would hang
        distributed = dataset.apply(
            tf.data.experimental.service.distribute(
                processing_mode=service.processing_mode,
                service=service.target,
                job_name=service.job_name,
            )
        )
        where = (
            "before the batch: each worker gets a share of every epoch and would end it with its "
            "own partial batch"
            if before_batch
            else "the workers batch too, one transfer per batch"
        )
        stages.append(
            PipelineStage(
                "distribute",
                arguments=(
                    ("processing_mode", repr(service.processing_mode)),
                    ("service", repr(service.target)),
                    ("job_name", repr(service.job_name)),
                ),
                reason=f"the stages above run on the tf.data service's workers; {where}; each "
                f"iteration first checks the dispatcher (timeout {service.timeout:g} s)",
            )
        )
        return _checked_at_each_iteration(distributed, service)


def plan_service_stage(
    service: str | DataService | None,
    *,
    repeat: bool | int,
    deterministic: bool,
    cache_path: str | None,
    shuffle_buffer: int | None,
    seed: int | None,
) -> ServiceStage:
    """Check ``service`` against the other arguments of ``build_pipeline`` and place its stage.

    Raises:
        TypeError: If ``service`` is neither an address nor a :class:`DataService`.
        ValueError: If the address is malformed, or ``service`` is combined with
            ``deterministic=True``, a file ``cache``, or (``parallel_epochs``) a shuffle
            ``seed``.
    """
    if service is None:
        return ServiceStage()
    if not isinstance(service, DataService):
        service = DataService(service)
    if deterministic:
        raise ValueError(
            "`deterministic=True` cannot hold with `service`: the workers hand out elements as "
            f"they are ready. Received: deterministic=True, service={service.target!r}"
        )
    if cache_path:
        raise ValueError(
            "`cache` to a file cannot go with `service`: every worker would write the same "
            "files (and with distributed_epoch hold only its share). Use cache=True (each "
            f"worker's memory). Received: cache={cache_path!r}, service={service.target!r}"
        )
    if service.processing_mode == "parallel_epochs" and shuffle_buffer and seed is not None:
        raise ValueError(
            "A shuffle `seed` with processing_mode='parallel_epochs' gives every worker the "
            "same order, so the trainer sees each example several times in a row. Drop the "
            f"seed or use 'distributed_epoch'. Received: seed={seed!r}"
        )
    before_batch = service.processing_mode == "distributed_epoch" and repeat is not True
    return ServiceStage(service, before_batch)


def _checked_at_each_iteration(
    distributed: tf.data.Dataset, service: DataService
) -> tf.data.Dataset:
    """``distributed``, but each new iterator first asks the dispatcher, within the timeout.

    Each iterator of a ``distribute`` dataset starts a job with the dispatcher and would wait
    forever for a dead one; the one-element dataset in front runs the check first.
    """

    def check() -> bool:
        dispatcher_workers(service.target, timeout=service.timeout)
        return True

    def checked(_: tf.Tensor) -> tf.Tensor:
        return tf.py_function(check, [], tf.bool)

    return tf.data.Dataset.from_tensors(0).map(checked).flat_map(lambda _: distributed)
