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

and sets ``tf.data.Options`` (non-deterministic order unless asked for, autotuning on, an
optional RAM budget). Mistakes the guide warns about are refused when the pipeline is built,
not at the first ``next()``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfthroughput._validation import check_positive_int
from tfthroughput.data.description import (
    AUTOTUNE_TEXT,
    PipelineDescription,
    PipelineStage,
    _record,
)
from tfthroughput.data.service import DataService, plan_service_stage

_GLOB_CHARACTERS = frozenset("*?[")


def build_pipeline(
    source: Any,
    *,
    batch_size: int | None = 32,
    read_fn: Callable[..., Any] | None = None,
    labels: Any = None,
    preprocess_fn: Callable[..., Any] | None = None,
    augment_fn: Callable[..., Any] | None = None,
    batch_fn: Callable[..., Any] | None = None,
    cache: bool | str | os.PathLike[str] = False,
    shuffle_buffer: int | None = None,
    repeat: bool | int = False,
    drop_remainder: bool = False,
    deterministic: bool = False,
    parallel_reads: int | None = None,
    ram_budget: int | None = None,
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
            path; a list/tuple of file paths. Files are TFRecord files unless ``read_fn`` is
            given.
        batch_size: Examples per batch. Defaults to 32. ``None`` yields single examples
            (no ``batch`` stage, and ``batch_fn`` must be ``None``).
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
        ram_budget: ``tf.data`` autotuning RAM budget in bytes. Defaults to ``None``: tf.data's
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
            ``ram_budget`` or ``threadpool_size`` is not positive; a glob matches no file; a
            file path does not exist; the cache folder is missing or not writable; ``cache`` is
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
        >>> ds = build_pipeline(
        ...     "photos/*.jpg",
        ...     labels=labels,  # one per file, in the sorted order of the glob's matches
        ...     read_fn=tf.io.read_file,
        ...     preprocess_fn=decode,
        ...     augment_fn=flip,
        ...     cache=True,
        ...     shuffle_buffer=1000,
        ...     batch_size=64,
        ... )
        >>> print(describe_pipeline(ds))
    """
    _check_callable(read_fn, "read_fn")
    _check_callable(preprocess_fn, "preprocess_fn")
    _check_callable(augment_fn, "augment_fn")
    _check_callable(batch_fn, "batch_fn")
    check_positive_int("batch_size", batch_size, allow_none=True)
    check_positive_int("shuffle_buffer", shuffle_buffer, allow_none=True)
    check_positive_int("parallel_reads", parallel_reads, allow_none=True)
    check_positive_int("ram_budget", ram_budget, allow_none=True)
    check_positive_int("threadpool_size", threadpool_size, allow_none=True)
    for name, value in (("drop_remainder", drop_remainder), ("deterministic", deterministic)):
        if not isinstance(value, bool):
            raise TypeError(f"`{name}` must be a bool. Received: {name}={value!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"`seed` must be an int or None. Received: seed={seed!r}")
    if not isinstance(repeat, bool):
        check_positive_int("repeat", repeat, allow_none=False, also="or a bool")
    cache_path = _check_cache(cache)
    # tf.data service (data/service.py): checked here, applied before the batch or the prefetch.
    service_stage = plan_service_stage(
        service,
        repeat=repeat,
        deterministic=deterministic,
        cache_path=cache_path,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
    )
    if batch_size is None and batch_fn is not None:
        raise ValueError(
            "`batch_fn` works on batches, so it needs a `batch_size`. "
            f"Received: batch_size=None, batch_fn={batch_fn!r}"
        )
    if drop_remainder and batch_size is None:
        raise ValueError(
            "`drop_remainder` needs a `batch_size`. Received: batch_size=None, drop_remainder=True"
        )

    parallel = parallel_reads if parallel_reads is not None else tf.data.AUTOTUNE
    parallel_text = str(parallel_reads) if parallel_reads is not None else AUTOTUNE_TEXT
    stages: list[PipelineStage] = []

    files = _resolve_files(source)
    if files is not None:
        dataset, source_text = _read_files(
            files,
            labels=labels,
            read_fn=read_fn,
            shuffle_files=shuffle_buffer is not None and cache_path is None,
            seed=seed,
            parallel=parallel,
            parallel_text=parallel_text,
            deterministic=deterministic,
            stages=stages,
        )
    else:
        if labels is not None:
            raise ValueError(
                "`labels` goes with a list of files (one label per file). For in-memory data "
                "or a Dataset, pass `source=(features, labels)` instead. "
                f"Received: labels={_short(labels)} with source={_short(source)}"
            )
        dataset, source_text = _from_memory_or_dataset(source)
        if read_fn is not None:
            dataset = _apply_read_fn(
                dataset, read_fn, parallel, parallel_text, deterministic, stages
            )

    if preprocess_fn is not None:
        dataset = _parallel_map(
            dataset,
            preprocess_fn,
            "preprocess_fn",
            deterministic,
            stages,
            "deterministic per-example work, in parallel"
            + (", before the cache so it runs once" if cache_path is not None else ""),
        )

    if cache_path is not None:
        if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
            raise ValueError(
                "`cache` needs a finite dataset: the source repeats forever, so the cache "
                "would never be complete and would grow until memory or disk runs out. "
                "Pass a finite source and use `repeat=True` instead. "
                f"Received: cache={cache!r} with source={_short(source)}"
            )
        dataset = dataset.cache(cache_path)
        where = "memory" if cache_path == "" else repr(cache_path)
        stages.append(
            PipelineStage(
                "cache",
                arguments=(("filename", repr(cache_path)),),
                reason=f"in {where}: later epochs skip everything above",
            )
        )

    if shuffle_buffer is not None:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        stages.append(
            PipelineStage(
                "shuffle",
                arguments=(
                    ("buffer_size", str(shuffle_buffer)),
                    ("seed", str(seed)),
                    ("reshuffle_each_iteration", "True"),
                ),
                reason=(
                    "after the cache, so each epoch has a new order"
                    if cache_path is not None
                    else "a new order each epoch"
                ),
            )
        )

    if repeat is not False:
        count = None if repeat is True else repeat
        dataset = dataset.repeat(count)
        stages.append(
            PipelineStage(
                "repeat",
                arguments=(("count", str(count)),),
                reason="after the shuffle, so epochs do not blend into each other",
            )
        )

    if augment_fn is not None:
        dataset = _parallel_map(
            dataset,
            augment_fn,
            "augment_fn",
            deterministic,
            stages,
            "random per-example work, after the cache so each epoch gets new draws",
            same_structure=True,
        )

    dataset = service_stage.apply(dataset, stages, before_batch=True)  # tf.data service

    if batch_size is not None:
        _check_batchable(dataset, _last_function(read_fn, preprocess_fn, augment_fn))
        dataset = dataset.batch(
            batch_size,
            drop_remainder=drop_remainder,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
        stages.append(
            PipelineStage(
                "batch",
                arguments=(
                    ("batch_size", str(batch_size)),
                    ("drop_remainder", str(drop_remainder)),
                    ("num_parallel_calls", AUTOTUNE_TEXT),
                    ("deterministic", str(deterministic)),
                ),
                reason="before the vectorised map: one call per batch, not per example",
            )
        )

    if batch_fn is not None:
        dataset = _parallel_map(
            dataset,
            batch_fn,
            "batch_fn",
            deterministic,
            stages,
            "vectorised per-batch work, in parallel",
        )

    dataset = service_stage.apply(dataset, stages, before_batch=False)  # tf.data service

    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    stages.append(
        PipelineStage(
            "prefetch",
            arguments=(("buffer_size", AUTOTUNE_TEXT),),
            reason="last: prepares the next batches while the model trains on this one",
        )
    )

    options = tf.data.Options()
    options.deterministic = deterministic
    options.autotune.enabled = True
    if ram_budget is not None:
        options.autotune.ram_budget = int(ram_budget)
    if threadpool_size is None and parallel_reads is not None:
        if parallel_reads > (os.cpu_count() or 1):
            threadpool_size = parallel_reads
    if threadpool_size is not None:
        options.threading.private_threadpool_size = int(threadpool_size)
    dataset = dataset.with_options(options)

    _record(dataset, PipelineDescription(source=source_text, stages=tuple(stages)))
    return dataset


# ---------------------------------------------------------------------------------------------
# Sources


def _resolve_files(source: Any) -> list[str] | None:
    """File paths named by ``source``, or ``None`` when it is not a file source."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if _GLOB_CHARACTERS & set(path):
            matches = sorted(tf.io.gfile.glob(path))
            if not matches:
                raise ValueError(
                    f"`source` is a glob pattern that matches no file. Received: source={path!r}"
                )
            return matches
        if not tf.io.gfile.exists(path):
            raise ValueError(f"`source` is a path that does not exist. Received: source={path!r}")
        if tf.io.gfile.isdir(path):
            raise ValueError(
                "`source` is a folder; pass a glob pattern of its files instead, e.g. "
                f"{os.path.join(path, '*.jpg')!r}. Received: source={path!r}"
            )
        return [path]
    if (
        isinstance(source, (list, tuple))
        and source
        and all(isinstance(item, (str, os.PathLike)) for item in source)
    ):
        return [os.fspath(item) for item in source]
    return None


def _read_files(
    files: list[str],
    *,
    labels: Any,
    read_fn: Callable[..., Any] | None,
    shuffle_files: bool,
    seed: int | None,
    parallel: int,
    parallel_text: str,
    deterministic: bool,
    stages: list[PipelineStage],
) -> tuple[tf.data.Dataset, str]:
    if labels is not None:
        labels = _check_labels(labels, len(files))
        if read_fn is None:
            raise ValueError(
                "`labels` needs a `read_fn` that reads one example per file; TFRecord files "
                "carry their labels inside the records (parse them in `preprocess_fn`). "
                f"Received: labels={_short(labels)}, read_fn=None"
            )
        names = tf.data.Dataset.from_tensor_slices((files, labels))
    else:
        names = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_files and len(files) > 1:
        names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        stages.append(
            PipelineStage(
                "shuffle",
                arguments=(("buffer_size", str(len(files))), ("seed", str(seed))),
                reason="file names, reshuffled each epoch (cheap; no cache to freeze it)",
            )
        )
    kind = "TFRecord" if read_fn is None else f"read by {_name(read_fn)}"
    source_text = f"{len(files)} file{'s' if len(files) != 1 else ''} ({kind})" + (
        ", with labels" if labels is not None else ""
    )
    if read_fn is None:
        dataset = names.interleave(
            tf.data.TFRecordDataset,
            cycle_length=parallel,
            num_parallel_calls=parallel,
            deterministic=deterministic,
        )
        stages.append(_interleave_stage("TFRecordDataset", parallel_text, deterministic))
        return dataset, source_text
    if labels is not None:
        read_one = _checked(read_fn, "read_fn")

        def read_labelled(path: tf.Tensor, label: tf.Tensor) -> tuple[Any, tf.Tensor]:
            return read_one(path), label

        dataset = names.map(read_labelled, num_parallel_calls=parallel, deterministic=deterministic)
        if isinstance(dataset.element_spec[0], tf.data.DatasetSpec):
            raise ValueError(
                "`labels` needs a `read_fn` that returns one example per file, but it returned "
                f"a Dataset. Received: read_fn={read_fn!r}"
            )
        stages.append(_read_map_stage(read_fn, parallel_text, deterministic))
        return dataset, source_text
    return _apply_read_fn(names, read_fn, parallel, parallel_text, deterministic, stages), (
        source_text
    )


def _apply_read_fn(
    dataset: tf.data.Dataset,
    read_fn: Callable[..., Any],
    parallel: int,
    parallel_text: str,
    deterministic: bool,
    stages: list[PipelineStage],
) -> tf.data.Dataset:
    """Parallel ``map`` if ``read_fn`` returns one example, parallel ``interleave`` if a Dataset."""
    checked = _checked(read_fn, "read_fn")
    mapped = dataset.map(checked, num_parallel_calls=parallel, deterministic=deterministic)
    if not isinstance(mapped.element_spec, tf.data.DatasetSpec):
        stages.append(_read_map_stage(read_fn, parallel_text, deterministic))
        return mapped
    stages.append(_interleave_stage(_name(read_fn), parallel_text, deterministic))
    return dataset.interleave(
        checked, cycle_length=parallel, num_parallel_calls=parallel, deterministic=deterministic
    )


def _from_memory_or_dataset(source: Any) -> tuple[tf.data.Dataset, str]:
    if isinstance(source, tf.data.Dataset):
        cardinality = int(source.cardinality())
        size = {
            int(tf.data.INFINITE_CARDINALITY): "infinite",
            int(tf.data.UNKNOWN_CARDINALITY): "unknown size",
        }.get(cardinality, f"{cardinality} elements")
        return source, f"tf.data.Dataset ({size})"
    if not _is_array_structure(source):
        raise TypeError(
            "`source` must be a tf.data.Dataset, in-memory data (NumPy array, tensor, list of "
            "numbers, or a tuple/dict of those), a glob pattern, a file path, or a list of file "
            f"paths. Received: source={_short(source)} of type {type(source).__name__}"
        )
    try:
        dataset = tf.data.Dataset.from_tensor_slices(source)
    except (ValueError, TypeError) as error:
        raise ValueError(
            "`source` could not be sliced into examples along its first axis (all its arrays "
            f"must have the same length): {error}. Received: source={_short(source)}"
        ) from error
    return dataset, f"in-memory data ({int(dataset.cardinality())} examples)"


def _is_array_structure(source: Any) -> bool:
    if isinstance(source, (np.ndarray, tf.Tensor, np.generic)):
        return True
    if isinstance(source, Mapping):
        return bool(source) and all(_is_array_structure(v) for v in source.values())
    if isinstance(source, tuple):
        return bool(source) and all(_is_array_structure(v) for v in source)
    # A top-level list of paths was taken as files before; other lists are data.
    return isinstance(source, list) and bool(source)


def _check_labels(labels: Any, num_files: int) -> Any:
    if isinstance(labels, (str, bytes)) or not isinstance(
        labels, (Sequence, np.ndarray, tf.Tensor)
    ):
        raise TypeError(
            "`labels` must be a list or array with one label per file. "
            f"Received: labels={_short(labels)} of type {type(labels).__name__}"
        )
    if len(labels) != num_files:
        raise ValueError(
            f"`labels` must have one label per file ({num_files} files). "
            f"Received: {len(labels)} labels"
        )
    return labels


# ---------------------------------------------------------------------------------------------
# Guards


def _check_callable(fn: Any, name: str) -> None:
    if fn is not None and not callable(fn):
        raise TypeError(f"`{name}` must be a callable or None. Received: {name}={fn!r}")


def _check_cache(cache: Any) -> str | None:
    """``None`` for no cache, ``""`` for memory, else the file prefix (its folder checked)."""
    if cache is False:
        return None
    if cache is True:
        return ""
    if not isinstance(cache, (str, os.PathLike)):
        raise TypeError(
            "`cache` must be a bool (True: in memory) or a file path prefix. "
            f"Received: cache={cache!r}"
        )
    path = os.fspath(cache)
    if not path:
        raise ValueError(
            "`cache` must be True for an in-memory cache or a non-empty path. Received: cache=''"
        )
    if "://" in path:  # remote file systems (gs://, hdfs://): tf.data reports problems there
        return path
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(
            f"`cache` must be in an existing folder; {folder!r} does not exist. "
            f"Received: cache={path!r}"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(
            f"`cache` must be in a writable folder; {folder!r} is not writable. "
            f"Received: cache={path!r}"
        )
    return path


def _checked(fn: Callable[..., Any], name: str, *, same_structure: bool = False) -> Callable:
    """Wrap a user function so that a wrong return is refused while tf.data traces it."""

    def call(*args: Any) -> Any:
        result = fn(*args)
        if result is None:
            raise TypeError(
                f"`{name}` must return a tensor or a structure of tensors, but it returned "
                f"None (a missing `return`?). Received: {name}={fn!r}"
            )
        if same_structure:
            given = args[0] if len(args) == 1 else args
            try:
                tf.nest.assert_same_structure(given, result, check_types=False)
            except (ValueError, TypeError) as error:
                raise ValueError(
                    f"`{name}` must return the same structure it receives (e.g. (image, label) "
                    f"-> (image, label)); change the structure in `preprocess_fn` instead. "
                    f"Received: {name}={fn!r} returned {_structure(result)} for "
                    f"{_structure(given)}"
                ) from error
        return result

    call.__name__ = name  # tf.data names the traced function after it: map(preprocess_fn)
    return call


def _check_batchable(dataset: tf.data.Dataset, producer: str) -> None:
    unknown = [
        spec
        for spec in tf.nest.flatten(dataset.element_spec)
        if isinstance(spec, tf.TensorSpec) and not spec.shape.is_fully_defined()
    ]
    if unknown:
        raise ValueError(
            "Examples must have fully known shapes to be batched (tensors of different shapes "
            f"cannot be stacked); give them one in `{producer}` (e.g. tf.image.resize, "
            "tf.ensure_shape), or pass `batch_size=None` and batch them yourself (e.g. "
            f"padded_batch). Received: element_spec={dataset.element_spec}"
        )


# ---------------------------------------------------------------------------------------------
# Description helpers


def _parallel_map(
    dataset: tf.data.Dataset,
    fn: Callable,
    name: str,
    deterministic: bool,
    stages: list[PipelineStage],
    reason: str,
    *,
    same_structure: bool = False,
) -> tf.data.Dataset:
    """``map(fn)`` with ``num_parallel_calls=AUTOTUNE``, recorded as a stage."""
    stages.append(
        PipelineStage(
            "map",
            function=name,
            arguments=(
                ("num_parallel_calls", AUTOTUNE_TEXT),
                ("deterministic", str(deterministic)),
            ),
            reason=reason,
        )
    )
    return dataset.map(
        _checked(fn, name, same_structure=same_structure),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )


def _read_map_stage(read_fn: Callable, parallel_text: str, deterministic: bool) -> PipelineStage:
    return PipelineStage(
        "map",
        function=f"read_fn={_name(read_fn)}",
        arguments=(("num_parallel_calls", parallel_text), ("deterministic", str(deterministic))),
        reason="reads several files at once",
    )


def _interleave_stage(function: str, parallel_text: str, deterministic: bool) -> PipelineStage:
    return PipelineStage(
        "interleave",
        function=function,
        arguments=(
            ("cycle_length", parallel_text),
            ("num_parallel_calls", parallel_text),
            ("deterministic", str(deterministic)),
        ),
        reason="reads several files at once, mixing their records",
    )


def _last_function(read_fn: Any, preprocess_fn: Any, augment_fn: Any) -> str:
    for name, fn in (("augment_fn", augment_fn), ("preprocess_fn", preprocess_fn)):
        if fn is not None:
            return name
    return "read_fn" if read_fn is not None else "preprocess_fn"


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _structure(value: Any) -> str:
    return str(tf.nest.map_structure(lambda _: "*", value))


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
