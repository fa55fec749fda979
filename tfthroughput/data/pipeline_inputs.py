"""The first stages of :func:`tfthroughput.build_pipeline`: read files, in-memory data or a dataset.

Files are checked when the pipeline is built (a glob that matches nothing, a path that does not
exist, strings that are not paths at all) and read in parallel: ``interleave`` for a format
with many records per file, a parallel ``map`` of ``read_fn`` for one example per file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfthroughput.data.guards import _check_not_batched, _checked, _short
from tfthroughput.data.stages import _name, _PipelineSteps

_GLOB_CHARACTERS = frozenset("*?[")
_NAMED_MISSING = 3  # missing files quoted in the error; the rest are counted


def _source_steps(
    source: Any,
    *,
    labels: Any,
    read_fn: Callable[..., Any] | None,
    batch_size: int | None,
    shuffle_files: bool,
    seed: int | None,
    parallel: int,
    deterministic: bool,
) -> tuple[_PipelineSteps, str]:
    """The pipeline's first steps, reading ``source``, and the description of the source."""
    files = _resolve_files(source)
    if files is not None:
        return _read_files(
            files,
            labels=labels,
            read_fn=read_fn,
            shuffle_files=shuffle_files,
            seed=seed,
            parallel=parallel,
            deterministic=deterministic,
        )
    if labels is not None:
        raise ValueError(
            "`labels` goes with a list of files (one label per file). For in-memory data "
            "or a Dataset, pass `source=(features, labels)` instead. "
            f"Received: labels={_short(labels)} with source={_short(source)}"
        )
    dataset, source_text = _from_memory_or_dataset(source)
    _check_not_batched(dataset, batch_size)
    steps = _PipelineSteps(dataset)
    if read_fn is not None:
        _apply_read_fn(steps, read_fn, parallel, deterministic)
    return steps, source_text


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
        paths = [os.fspath(item) for item in source]
        _check_paths_exist(paths, source)
        return paths
    return None


def _check_paths_exist(paths: list[str], source: Any) -> None:
    """Every listed file must exist now, not at the first ``next()``; name the missing ones."""
    missing = [path for path in paths if not tf.io.gfile.exists(path)]
    if not missing:
        return
    if len(missing) == len(paths):
        raise ValueError(
            f"`source` is a list of strings, read as file paths, but none of its {len(paths)} "
            "strings is an existing file. For in-memory text, pass an array or tensor "
            "(e.g. `np.array(texts)`) or a `tf.data.Dataset`. "
            f"Received: source={_short(source)}"
        )
    named = ", ".join(repr(path) for path in missing[:_NAMED_MISSING])
    more = f" and {len(missing) - _NAMED_MISSING} more" if len(missing) > _NAMED_MISSING else ""
    raise ValueError(
        f"`source` lists {len(missing)} file{'s' if len(missing) > 1 else ''} that "
        f"do{'es' if len(missing) == 1 else ''} not exist: {named}{more}. "
        f"Received: source={_short(source)}"
    )


def _read_files(
    files: list[str],
    *,
    labels: Any,
    read_fn: Callable[..., Any] | None,
    shuffle_files: bool,
    seed: int | None,
    parallel: int,
    deterministic: bool,
) -> tuple[_PipelineSteps, str]:
    """Steps that read ``files`` (shuffled first if asked), and the source's description."""
    if labels is not None:
        labels = _check_labels(labels, len(files))
        if read_fn is None:
            raise ValueError(
                "`labels` needs a `read_fn` that reads one example per file; TFRecord files "
                "carry their labels inside the records (parse them in `preprocess_fn`). "
                f"Received: labels={_short(labels)}, read_fn=None"
            )
        steps = _PipelineSteps(tf.data.Dataset.from_tensor_slices((files, labels)))
    else:
        steps = _PipelineSteps(tf.data.Dataset.from_tensor_slices(files))
    if shuffle_files and len(files) > 1:
        steps.apply(
            "shuffle",
            reason="file names, reshuffled each epoch (cheap; no cache to freeze it)",
            buffer_size=len(files),
            seed=seed,
            reshuffle_each_iteration=True,
        )
    kind = "TFRecord" if read_fn is None else f"read by {_name(read_fn)}"
    source_text = f"{len(files)} file{'s' if len(files) != 1 else ''} ({kind})" + (
        ", with labels" if labels is not None else ""
    )
    if read_fn is None:
        _interleave(steps, tf.data.TFRecordDataset, "TFRecordDataset", parallel, deterministic)
    elif labels is not None:
        read_one = _checked(read_fn, "read_fn")

        def read_labelled(path: tf.Tensor, label: tf.Tensor) -> tuple[Any, tf.Tensor]:
            return read_one(path), label

        _read_map(steps, read_labelled, read_fn, parallel, deterministic)
        if isinstance(steps.dataset.element_spec[0], tf.data.DatasetSpec):
            raise ValueError(
                "`labels` needs a `read_fn` that returns one example per file, but it returned "
                f"a Dataset. Received: read_fn={read_fn!r}"
            )
    else:
        _apply_read_fn(steps, read_fn, parallel, deterministic)
    return steps, source_text


def _apply_read_fn(
    steps: _PipelineSteps, read_fn: Callable[..., Any], parallel: int, deterministic: bool
) -> None:
    """Parallel ``map`` if ``read_fn`` returns one example, parallel ``interleave`` if a Dataset."""
    checked = _checked(read_fn, "read_fn")
    returns = steps.dataset.map(checked).element_spec  # traced once, to see what it returns
    if isinstance(returns, tf.data.DatasetSpec):
        _interleave(steps, checked, _name(read_fn), parallel, deterministic)
    else:
        _read_map(steps, checked, read_fn, parallel, deterministic)


def _read_map(
    steps: _PipelineSteps,
    fn: Callable[..., Any],
    read_fn: Callable[..., Any],
    parallel: int,
    deterministic: bool,
) -> None:
    steps.apply(
        "map",
        fn,
        function=f"read_fn={_name(read_fn)}",
        reason="reads several files at once",
        num_parallel_calls=parallel,
        deterministic=deterministic,
    )


def _interleave(
    steps: _PipelineSteps, fn: Callable[..., Any], name: str, parallel: int, deterministic: bool
) -> None:
    steps.apply(
        "interleave",
        fn,
        function=name,
        reason="reads several files at once, mixing their records",
        cycle_length=parallel,
        num_parallel_calls=parallel,
        deterministic=deterministic,
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
