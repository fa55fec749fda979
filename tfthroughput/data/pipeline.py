"""Build a ``tf.data`` input pipeline in the order TensorFlow's data performance guide recommends.

The guide (https://www.tensorflow.org/guide/data_performance) is prose; this module is that prose
as code. :func:`build_pipeline` places each stage where it belongs:

1. files read in parallel (``interleave`` over files, or a parallel ``map`` of a read function),
2. deterministic per-element preprocessing in a parallel ``map``,
3. ``cache`` (memory or file), so that work is done once,
4. ``shuffle`` after the cache (a cache after a shuffle would freeze the first epoch's order),
5. ``repeat``,
6. random augmentation in a parallel ``map`` *after* the cache, so every epoch sees fresh draws,
7. ``batch``, then the vectorised (per-batch) ``map``,
8. ``prefetch(AUTOTUNE)`` last, to overlap the whole pipeline with the training step,

with, if asked for, ``distribute`` to a tf.data service before 7 or 8 (see
:mod:`tfthroughput.data.service`),

and sets ``tf.data.Options`` (non-deterministic order unless asked for, autotuning on,
consecutive maps fused into one, an optional RAM budget). Each stage is one step of
:class:`~tfthroughput.data.stages._PipelineSteps`, which applies the transformation and records
it for :func:`describe_pipeline` in one call. The sources live in
:mod:`tfthroughput.data.pipeline_inputs`; mistakes the guide warns about are refused by
:mod:`tfthroughput.data.guards` when the pipeline is built, not at the first ``next()``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tfthroughput.data._pipeline_arguments import _PipelineArguments
from tfthroughput.data.description import PipelineDescription, _record
from tfthroughput.data.device_augmentation import record_cpu_augmentation, transfer_fields
from tfthroughput.data.guards import _check_batchable, _check_cacheable, _last_function
from tfthroughput.data.pipeline_inputs import _source_steps
from tfthroughput.data.service import DataService
from tfthroughput.data.stages import _PipelineSteps


def build_pipeline(
    source: Any,
    *,
    batch_size: int | None = 32,
    read_fn: Callable[..., Any] | None = None,
    labels: Any = None,
    preprocess_fn: Callable[..., Any] | None = None,
    augment_fn: Callable[..., Any] | None = None,
    batch_fn: Callable[..., Any] | None = None,
    augment_on: str = "cpu",
    cache: bool | str | os.PathLike[str] = False,
    shuffle_buffer: int | None = None,
    repeat: bool | int = False,
    drop_remainder: bool = False,
    deterministic: bool = False,
    parallel_reads: int | None = None,
    ram_budget_mib: int | None = None,
    threadpool_size: int | None = None,
    seed: int | None = None,
    service: str | DataService | None = None,
) -> tf.data.Dataset:
    """Build a ``tf.data.Dataset`` whose stages follow TensorFlow's data performance guide.

    Stages, in order (each only if asked for): read files in parallel -> ``map(preprocess_fn)``
    -> ``cache`` -> ``shuffle`` -> ``repeat`` -> ``map(augment_fn)`` -> ``batch`` ->
    ``map(batch_fn)`` -> ``prefetch(AUTOTUNE)``. Every ``map`` runs with
    ``num_parallel_calls=AUTOTUNE``. :func:`describe_pipeline` tells what was built; the docs'
    page "Fix the input pipeline" details every argument.

    Args:
        source: A ``tf.data.Dataset``; in-memory data (arrays, tensors, or a tuple/dict of
            them); a glob, a file path or a list of paths (TFRecord files unless ``read_fn``).
        batch_size: Examples per batch. Defaults to 32. ``None``: no ``batch`` stage (single
            examples, or an already batched dataset kept as it is).
        read_fn: One source element (a file path) -> one example (mapped in parallel) or a
            ``tf.data.Dataset`` of examples (interleaved in parallel). Defaults to ``None``.
        labels: With a list of files and a one-example ``read_fn``: one label per file.
        preprocess_fn: Deterministic per-example work, before the cache (runs once).
        augment_fn: Random per-example work, after the cache and the shuffle (new draws).
        batch_fn: Vectorised work on whole batches, after ``batch``.
        augment_on: ``"cpu"`` (default), or ``"device"``: ``augment_fn`` and ``batch_fn`` run
            per batch in the training step (:class:`~tfthroughput.data.DeviceAugmented`), and
            the pipeline ships what ``preprocess_fn`` made (``uint8`` images, say).
        cache: ``False`` (default): none. ``True``: in memory. A path: files with that prefix
            (an existing complete cache there is read instead of the source).
        shuffle_buffer: Examples in the shuffle buffer; ``None`` (default): no shuffle.
        repeat: ``False`` (default): one pass. ``True``: forever. An int: that many passes.
        drop_remainder: Drop the last, smaller batch. Defaults to ``False``.
        deterministic: Keep the order through the parallel stages. Defaults to ``False``.
        parallel_reads: Files read at once. Defaults to ``None``: ``AUTOTUNE``.
        ram_budget_mib: ``tf.data`` autotuning RAM budget in MiB. Defaults to ``None``.
        threadpool_size: Threads of a private threadpool. Defaults to ``None``.
        seed: Seed of the shuffle (and file shuffle). Defaults to ``None``: random.
        service: A tf.data service (``"grpc://host:port"`` or a
            :class:`~tfthroughput.data.service.DataService`) to run the work. Defaults to ``None``.

    Returns:
        The ``tf.data.Dataset``, ready for ``model.fit``.

    Raises:
        TypeError: If an argument has the wrong type, or a function returns ``None``.
        ValueError: If a count is not positive, a file is missing, a cache cannot go where
            asked, ``augment_fn`` changes the structure, shapes to batch are unknown,
            ``service`` is malformed or combined with an option it cannot honour, or a function
            for ``augment_on="device"`` cannot run on batches or is not random per example.
        DataServiceUnavailable: If no dispatcher with a worker answers at ``service``.

    Example:
        >>> ds = build_pipeline(  # doctest: +SKIP
        ...     "photos/*.jpg", labels=labels, read_fn=tf.io.read_file, preprocess_fn=decode
        ... )
    """
    given = dict(locals())  # as called: diagnose and tune rebuild it with changes
    arguments = _PipelineArguments(**given)  # checked on creation: data/_pipeline_arguments.py
    steps, source_text = _read_source(arguments)
    _add_example_stages(steps, arguments)
    _add_batch_stages(steps, arguments)
    dataset = steps.dataset.with_options(_options(arguments))
    _record_built(dataset, arguments, given, source_text, steps)
    return dataset


def _record_built(
    dataset: tf.data.Dataset,
    arguments: _PipelineArguments,
    given: dict[str, Any],
    source_text: str,
    steps: _PipelineSteps,
) -> None:
    """Record the description (with the bytes shipped and the work left to the training step)
    and, for a CPU augmentation, how to rebuild the pipeline (data/device_augmentation.py)."""
    transfer = transfer_fields(dataset, arguments.batch_size, arguments.device_work)
    if arguments.cpu_augment_fn is not None:
        record_cpu_augmentation(dataset, lambda **changes: build_pipeline(**{**given, **changes}))
    _record(
        dataset, PipelineDescription(source=source_text, stages=tuple(steps.stages), **transfer)
    )


def _read_source(arguments: _PipelineArguments) -> tuple[_PipelineSteps, str]:
    """Stage 1: the source, its files read in parallel; the steps so far and the source's text."""
    return _source_steps(
        arguments.source,
        labels=arguments.labels,
        read_fn=arguments.read_fn,
        batch_size=arguments.batch_size,
        shuffle_files=arguments.shuffle_buffer is not None and arguments.cache_path is None,
        seed=arguments.seed,
        parallel=arguments.parallel,
        deterministic=arguments.deterministic,
    )


def _add_example_stages(steps: _PipelineSteps, arguments: _PipelineArguments) -> None:
    """Stages 2-6, per example: preprocess, cache, shuffle, repeat, augment."""
    cache_path = arguments.cache_path
    if arguments.preprocess_fn is not None:
        steps.parallel_map(
            arguments.preprocess_fn,
            "preprocess_fn",
            deterministic=arguments.deterministic,
            reason="deterministic per-example work, in parallel"
            + (", before the cache so it runs once" if cache_path is not None else ""),
        )
    if cache_path is not None:
        _check_cacheable(steps.dataset, arguments.cache, arguments.source)
        where = "memory" if cache_path == "" else repr(cache_path)
        steps.apply(
            "cache", reason=f"in {where}: later epochs skip everything above", filename=cache_path
        )
    if arguments.shuffle_buffer is not None:
        steps.apply(
            "shuffle",
            reason="after the cache, so each epoch has a new order"
            if cache_path is not None
            else "a new order each epoch",
            buffer_size=arguments.shuffle_buffer,
            seed=arguments.seed,
            reshuffle_each_iteration=True,
        )
    if arguments.repeat is not False:
        steps.apply(
            "repeat",
            reason="after the shuffle, so epochs do not blend into each other",
            count=None if arguments.repeat is True else arguments.repeat,
        )
    if arguments.cpu_augment_fn is not None:
        steps.parallel_map(
            arguments.cpu_augment_fn,
            "augment_fn",
            deterministic=arguments.deterministic,
            reason="random per-example work, after the cache so each epoch gets new draws",
            same_structure=True,
        )


def _add_batch_stages(steps: _PipelineSteps, arguments: _PipelineArguments) -> None:
    """Stages 7-8: the tf.data service where it fits, batch, the per-batch map, prefetch."""
    service_stage = arguments.service_stage
    steps.dataset = service_stage.apply(steps.dataset, steps.stages, before_batch=True)
    if arguments.batch_size is not None:
        last = _last_function(arguments.read_fn, arguments.preprocess_fn, arguments.cpu_augment_fn)
        _check_batchable(steps.dataset, last)
        steps.apply(
            "batch",
            reason="before the vectorised map: one call per batch, not per example",
            batch_size=arguments.batch_size,
            drop_remainder=arguments.drop_remainder,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=arguments.deterministic,
        )
    if arguments.cpu_batch_fn is not None:
        steps.parallel_map(
            arguments.cpu_batch_fn,
            "batch_fn",
            deterministic=arguments.deterministic,
            reason="vectorised per-batch work, in parallel",
        )
    steps.dataset = service_stage.apply(steps.dataset, steps.stages, before_batch=False)
    steps.apply(
        "prefetch",
        reason="last: prepares the next batches while the model trains on this one",
        buffer_size=tf.data.AUTOTUNE,
    )


def _options(arguments: _PipelineArguments) -> tf.data.Options:
    """The ``tf.data.Options`` of the whole pipeline."""
    ram_budget_mib = arguments.ram_budget_mib
    threadpool_size = arguments.threadpool_size
    parallel_reads = arguments.parallel_reads
    options = tf.data.Options()
    options.deterministic = arguments.deterministic
    options.autotune.enabled = True
    # One function call per element instead of one per map, and no buffer and thread handoff
    # between the builder's consecutive maps: measured +5-9 % on a CPU-bound JPEG pipeline
    # (benchmarks/pipeline_jpeg.py), which then matches what tf.data makes of a plain map.
    options.experimental_optimization.map_fusion = True
    if ram_budget_mib is not None:
        options.autotune.ram_budget = int(ram_budget_mib) * 2**20  # tf.data counts bytes
    if threadpool_size is None and parallel_reads is not None:
        # Functions that wait (generators, remote reads) would queue for the shared pool.
        if parallel_reads > (os.cpu_count() or 1):
            threadpool_size = parallel_reads
    if threadpool_size is not None:
        options.threading.private_threadpool_size = int(threadpool_size)
    return options
