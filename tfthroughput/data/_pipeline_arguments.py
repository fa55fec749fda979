"""The arguments of :func:`tfthroughput.build_pipeline`, checked once, in one value.

:func:`~tfthroughput.data.pipeline.build_pipeline` hands all its arguments here first; the
stages it then adds read them, and what the checks derived (the cache path, the tf.data service
stage, the parallelism of the reads), from this one object. A new argument of the builder is a
new field here, checked in ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tfthroughput.data.device_augmentation import DeviceWork, plan_device_work
from tfthroughput.data.guards import _check_arguments, _check_cache
from tfthroughput.data.service import DataService, ServiceStage, plan_service_stage


@dataclasses.dataclass(frozen=True)
class _PipelineArguments:
    """What the caller asked :func:`build_pipeline` for, checked, plus what follows from it.

    Attributes:
        cache_path: ``None`` for no cache, ``""`` for memory, else the cache's file prefix.
        service_stage: Where and how the pipeline goes to a tf.data service (or does not).
        parallel: Parallel calls of the reads: ``parallel_reads`` or ``AUTOTUNE``.
        device_work: With ``augment_on="device"``, the functions left to the training step
            (probed once the pipeline is built); else ``None``.
    """

    source: Any
    batch_size: int | None
    read_fn: Callable[..., Any] | None
    labels: Any
    preprocess_fn: Callable[..., Any] | None
    augment_fn: Callable[..., Any] | None
    batch_fn: Callable[..., Any] | None
    augment_on: str
    cache: bool | str | os.PathLike[str]
    shuffle_buffer: int | None
    repeat: bool | int
    drop_remainder: bool
    deterministic: bool
    parallel_reads: int | None
    ram_budget_mib: int | None
    threadpool_size: int | None
    seed: int | None
    service: str | DataService | None
    cache_path: str | None = dataclasses.field(init=False)
    service_stage: ServiceStage = dataclasses.field(init=False)
    parallel: int = dataclasses.field(init=False)
    device_work: DeviceWork | None = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        _check_arguments(
            functions={
                "read_fn": self.read_fn,
                "preprocess_fn": self.preprocess_fn,
                "augment_fn": self.augment_fn,
                "batch_fn": self.batch_fn,
            },
            batch_size=self.batch_size,
            shuffle_buffer=self.shuffle_buffer,
            parallel_reads=self.parallel_reads,
            ram_budget_mib=self.ram_budget_mib,
            threadpool_size=self.threadpool_size,
            drop_remainder=self.drop_remainder,
            deterministic=self.deterministic,
            seed=self.seed,
            repeat=self.repeat,
        )
        cache_path = _check_cache(self.cache)
        # tf.data service (data/service.py): checked here, applied before the batch or the prefetch.
        service_stage = plan_service_stage(
            self.service,
            repeat=self.repeat,
            deterministic=self.deterministic,
            cache_path=cache_path,
            shuffle_buffer=self.shuffle_buffer,
            seed=self.seed,
        )
        parallel = self.parallel_reads if self.parallel_reads is not None else tf.data.AUTOTUNE
        # augment_on="device" (data/device_augmentation.py): the functions leave the pipeline.
        device_work = plan_device_work(
            self.augment_on,
            augment_fn=self.augment_fn,
            batch_fn=self.batch_fn,
            batch_size=self.batch_size,
        )
        # Frozen: the derived values are set once, here, like the arguments.
        object.__setattr__(self, "cache_path", cache_path)
        object.__setattr__(self, "service_stage", service_stage)
        object.__setattr__(self, "parallel", parallel)
        object.__setattr__(self, "device_work", device_work)

    @property
    def cpu_augment_fn(self) -> Callable[..., Any] | None:
        """``augment_fn`` where it runs in the pipeline (``None`` when it moved to the step)."""
        return self.augment_fn if self.device_work is None else None

    @property
    def cpu_batch_fn(self) -> Callable[..., Any] | None:
        """``batch_fn`` where it runs in the pipeline (``None`` when it moved to the step)."""
        return self.batch_fn if self.device_work is None else None
