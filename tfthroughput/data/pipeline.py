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

from tfthroughput.data.description import PipelineDescription, _record
from tfthroughput.data.device_augmentation import (
    plan_device_work,
    record_cpu_augmentation,
    transfer_fields,
)
from tfthroughput.data.guards import (
    _check_arguments,
    _check_batchable,
    _check_cache,
    _check_cacheable,
    _last_function,
)
from tfthroughput.data.pipeline_inputs import _source_steps
from tfthroughput.data.service import DataService, plan_service_stage


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
    ``num_parallel_calls=AUTOTUNE``. :func:`describe_pipeline` tells what was built.

    Args:
        source: What to read. One of: a ``tf.data.Dataset``; in-memory data (a NumPy array, a
            tensor, a list of numbers, or a tuple/dict of those), sliced along the first axis;
            a glob pattern such as ``"data/*.tfrecord"`` (sorted matches) or a single file
            path; a list/tuple of file paths (every one must exist; in-memory strings go in
            an array, e.g. ``np.array(texts)``). Files are TFRecord files unless ``read_fn``
            is given.
        batch_size: Examples per batch. Defaults to 32. ``None`` yields single examples
            (no ``batch`` stage, and ``batch_fn`` must be ``None``); pass ``None`` too for a
            dataset that is already batched, to keep its batches.
        read_fn: Turns one source element (for files: the path, a scalar string tensor) into
            either one example (e.g. ``tf.io.read_file`` for a JPEG; mapped in parallel) or a
            ``tf.data.Dataset`` of examples (a file format with many records per file;
            interleaved in parallel). Defaults to ``None``: TFRecord files are read with
            ``tf.data.TFRecordDataset``; other sources are used as they are.
        labels: Only with a list of files and a ``read_fn`` that returns one example: one label
            per file (a list or array). Examples become ``(read_fn(path), label)``.
        preprocess_fn: Deterministic per-example work (decode, resize, parse), done before the
            cache, so with ``cache`` it runs once per example, not once per epoch.
        augment_fn: Random per-example work (random crop, flip, ...), done after the cache and
            the shuffle, so each epoch sees new draws. It must return the same structure it
            receives, e.g. ``(image, label) -> (image, label)``.
        batch_fn: Work on whole batches (vectorised, e.g. normalisation), after ``batch``.
        augment_on: Where ``augment_fn`` and ``batch_fn`` run. ``"cpu"`` (default): in the
            pipeline, as above. ``"device"``: once per batch inside the training step, on the
            accelerator, where a :class:`~tfthroughput.data.DeviceAugmented` model applies
            them (``augment_fn`` in training steps only, ``batch_fn`` in every step); the
            pipeline then ends at ``batch`` and ships what ``preprocess_fn`` made (keep images
            ``uint8`` there: a quarter of the bytes of ``float32``). Both functions then take
            whole batches, and ``augment_fn`` must draw its random values per example.
        cache: ``False`` (default): no cache. ``True``: cache in memory. A path: cache in
            files with that prefix (TensorFlow writes ``<path>.index`` and ``<path>_*.data*``;
            an existing complete cache there is read instead of the source, on later builds
            too). The folder must exist and be writable.
        shuffle_buffer: Examples held by the shuffle buffer; ``None`` (default): no shuffle.
            With a file source and no cache, the file order is reshuffled each epoch as well.
        repeat: ``False`` (default): one pass. ``True``: forever. An int: that many passes.
        drop_remainder: Drop the last, smaller batch. Defaults to ``False``.
        deterministic: Keep the order through the parallel stages, so every run yields the
            same sequence (with several files, records then alternate between
            ``parallel_reads`` files, as ``interleave`` does). Defaults to ``False``: stages may
            hand out whichever example is ready first, which is faster.
        parallel_reads: Files read at once (the interleave's ``cycle_length`` and parallel
            calls, or the read ``map``'s parallel calls). Defaults to ``None``: ``AUTOTUNE``,
            at most the number of CPU cores. Sources that wait rather than compute (network
            files, Python generators, ``tf.py_function``) gain from more; a value above the
            number of cores also sizes the threadpool (see ``threadpool_size``).
        ram_budget_mib: ``tf.data`` autotuning RAM budget in MiB. Defaults to ``None``: tf.data's
            own default, half of the RAM.
        threadpool_size: Threads of a private threadpool for the pipeline's functions
            (``tf.data.Options().threading.private_threadpool_size``). Defaults to ``None``:
            ``parallel_reads`` when that exceeds the number of CPU cores (functions that wait,
            like generators, would otherwise queue for the shared pool, one per core), else
            TensorFlow's shared pool.
        seed: Seed of the shuffle (and file shuffle). Defaults to ``None``: a random seed.
        service: A tf.data service to run the work on: a dispatcher address such as
            ``"grpc://localhost:5050"`` or a :class:`~tfthroughput.data.service.DataService`
            (processing mode, job name, timeout). Everything up to ``augment_fn`` (and the
            batching too, unless ``distributed_epoch`` with finite epochs) then runs on the
            service's workers; the final ``prefetch`` stays here. Defaults to ``None``: all
            work runs in this process.

    Returns:
        The ``tf.data.Dataset``, ready for ``model.fit``. Pass it to :func:`describe_pipeline`
        to list its stages and options.

    Raises:
        TypeError: If an argument has the wrong type, or ``preprocess_fn``/``augment_fn``/
            ``batch_fn``/``read_fn`` returns ``None``.
        ValueError: If ``batch_size``, ``shuffle_buffer``, ``repeat``, ``parallel_reads``,
            ``ram_budget_mib`` or ``threadpool_size`` is not positive; a glob matches no file; a
            file path (or one in a list) does not exist; a list of strings names no existing
            file (in-memory text, not paths); a ``batch_size`` is given for a dataset that is
            already batched; the cache folder is missing or not writable; ``cache`` is
            asked for on an infinite dataset; ``augment_fn`` changes the structure of the
            example; examples to be batched have shapes that are not fully known; or
            ``service`` is malformed or combined with ``deterministic=True``, a file ``cache``
            or (``parallel_epochs``) a shuffle ``seed``.
        DataServiceUnavailable: If no dispatcher with a worker answers at ``service`` within
            its timeout (30 s by default); also raised, inside a ``tf.errors.UnknownError``,
            when an iteration starts.

    Example:
        >>> def decode(data, label):
        ...     return tf.image.resize(tf.io.decode_jpeg(data, channels=3), (72, 72)), label
        >>> def flip(image, label):
        ...     return tf.image.random_flip_left_right(image), label
        >>> ds = build_pipeline(  # doctest: +SKIP
        ...     "photos/*.jpg",
        ...     labels=labels,  # one per file, in the sorted order of the glob's matches
        ...     read_fn=tf.io.read_file,
        ...     preprocess_fn=decode,
        ...     augment_fn=flip,
        ...     cache=True,
        ...     shuffle_buffer=1000,
        ...     batch_size=64,
        ... )
        >>> print(describe_pipeline(ds))  # doctest: +SKIP
    """
    arguments = dict(locals())  # for the rebuild without augmentation that diagnose times
    _check_arguments(
        functions={
            "read_fn": read_fn,
            "preprocess_fn": preprocess_fn,
            "augment_fn": augment_fn,
            "batch_fn": batch_fn,
        },
        batch_size=batch_size,
        shuffle_buffer=shuffle_buffer,
        parallel_reads=parallel_reads,
        ram_budget_mib=ram_budget_mib,
        threadpool_size=threadpool_size,
        drop_remainder=drop_remainder,
        deterministic=deterministic,
        seed=seed,
        repeat=repeat,
    )
    cache_path = _check_cache(cache)
    # augment_on="device" (data/device_augmentation.py): the functions leave the pipeline.
    device_work = plan_device_work(
        augment_on, augment_fn=augment_fn, batch_fn=batch_fn, batch_size=batch_size
    )
    if device_work is not None:
        augment_fn = batch_fn = None
    # tf.data service (data/service.py): checked here, applied before the batch or the prefetch.
    service_stage = plan_service_stage(
        service,
        repeat=repeat,
        deterministic=deterministic,
        cache_path=cache_path,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
    )
    parallel = parallel_reads if parallel_reads is not None else tf.data.AUTOTUNE

    steps, source_text = _source_steps(
        source,
        labels=labels,
        read_fn=read_fn,
        batch_size=batch_size,
        shuffle_files=shuffle_buffer is not None and cache_path is None,
        seed=seed,
        parallel=parallel,
        deterministic=deterministic,
    )
    if preprocess_fn is not None:
        steps.parallel_map(
            preprocess_fn,
            "preprocess_fn",
            deterministic=deterministic,
            reason="deterministic per-example work, in parallel"
            + (", before the cache so it runs once" if cache_path is not None else ""),
        )
    if cache_path is not None:
        _check_cacheable(steps.dataset, cache, source)
        where = "memory" if cache_path == "" else repr(cache_path)
        steps.apply(
            "cache", reason=f"in {where}: later epochs skip everything above", filename=cache_path
        )
    if shuffle_buffer is not None:
        steps.apply(
            "shuffle",
            reason="after the cache, so each epoch has a new order"
            if cache_path is not None
            else "a new order each epoch",
            buffer_size=shuffle_buffer,
            seed=seed,
            reshuffle_each_iteration=True,
        )
    if repeat is not False:
        steps.apply(
            "repeat",
            reason="after the shuffle, so epochs do not blend into each other",
            count=None if repeat is True else repeat,
        )
    if augment_fn is not None:
        steps.parallel_map(
            augment_fn,
            "augment_fn",
            deterministic=deterministic,
            reason="random per-example work, after the cache so each epoch gets new draws",
            same_structure=True,
        )
    steps.dataset = service_stage.apply(steps.dataset, steps.stages, before_batch=True)
    if batch_size is not None:
        _check_batchable(steps.dataset, _last_function(read_fn, preprocess_fn, augment_fn))
        steps.apply(
            "batch",
            reason="before the vectorised map: one call per batch, not per example",
            batch_size=batch_size,
            drop_remainder=drop_remainder,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
    if batch_fn is not None:
        steps.parallel_map(
            batch_fn,
            "batch_fn",
            deterministic=deterministic,
            reason="vectorised per-batch work, in parallel",
        )
    steps.dataset = service_stage.apply(steps.dataset, steps.stages, before_batch=False)
    steps.apply(
        "prefetch",
        reason="last: prepares the next batches while the model trains on this one",
        buffer_size=tf.data.AUTOTUNE,
    )

    dataset = steps.dataset.with_options(
        _options(deterministic, ram_budget_mib, threadpool_size, parallel_reads)
    )
    transfer = transfer_fields(dataset, batch_size, device_work)
    if augment_fn is not None:  # on the CPU (data/device_augmentation.py)
        record_cpu_augmentation(
            dataset, lambda **changes: build_pipeline(**{**arguments, **changes})
        )
    _record(
        dataset, PipelineDescription(source=source_text, stages=tuple(steps.stages), **transfer)
    )
    return dataset


def _options(
    deterministic: bool,
    ram_budget_mib: int | None,
    threadpool_size: int | None,
    parallel_reads: int | None,
) -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = deterministic
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
