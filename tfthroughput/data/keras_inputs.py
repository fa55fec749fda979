"""A ``keras.utils.PyDataset`` read the way ``fit`` reads it, for the tools that measure input.

A ``PyDataset`` is Keras 3's own way to load data in Python with worker threads or processes
(``workers``, ``use_multiprocessing``, ``max_queue_size``). ``fit`` (TensorFlow backend) turns
it into a ``tf.data`` pipeline through its data adapter: a generator over the PyDataset's
enqueuer, which runs the workers. :func:`keras_dataset` hands out exactly that pipeline, so
``diagnose`` can time the input alone with its workers, train on it, and hold a few of its
batches in memory; it stops the workers on exit. :class:`EndlessPyDataset` repeats a
PyDataset for any backend (``tune`` feeds it to ``fit`` for runs longer than one pass).

This is the package's one use of Keras's data adapter (``keras.src``): Keras has no public
way to iterate a PyDataset with its workers. TensorFlow is imported only by
:func:`keras_dataset`.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import keras

# Pipelines made here, and the workers of the PyDataset each reads: they are Keras's generator
# over Python code, not a tf.data pipeline the user wrote, so lint_pipeline's advice about
# tf.data stages does not apply to them.
_MADE_HERE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def is_py_dataset(value: object) -> bool:
    """Whether ``value`` is a ``keras.utils.PyDataset`` (its Keras 2 name: ``Sequence``)."""
    return isinstance(value, keras.utils.PyDataset)


def py_dataset_workers(dataset: object) -> str:
    """:func:`describe_workers` of the PyDataset a :func:`keras_dataset` pipeline reads."""
    return _MADE_HERE.get(dataset, "no workers")


def made_from_py_dataset(dataset: object) -> bool:
    """Whether ``dataset`` is a pipeline :func:`keras_dataset` made of a ``PyDataset``."""
    try:
        return dataset in _MADE_HERE
    except TypeError:
        return False


def check_not_one_pass(name: str, value: object) -> None:
    """Refuse a Python generator or iterator, which ``fit`` reads once, where the data must be
    read many times (``diagnose``, ``tune``), saying what to pass instead.

    Raises:
        TypeError: If ``value`` is an iterator (a generator object, ``iter(...)``).

    Example:
        >>> check_not_one_pass("data", (i for i in range(3)))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: `data` must be data that can be read again, ... Received: data=<generator ...
    """
    if isinstance(value, Iterator):
        raise TypeError(
            f"`{name}` must be data that can be read again, not a Python generator or iterator "
            "(read once, and every measurement here reads it many times): pass "
            "tf.data.Dataset.from_generator(make_batches, output_signature=...) with the "
            "function that makes the generator, or a keras.utils.PyDataset. "
            f"Received: {name}={value!r} of type {type(value).__name__}"
        )


def describe_workers(py_dataset: keras.utils.PyDataset) -> str:
    """``"2 worker processes"``, ``"4 worker threads"`` or ``"no workers"``.

    Example:
        >>> class Batches(keras.utils.PyDataset):
        ...     def __len__(self):
        ...         return 1
        ...     def __getitem__(self, index):
        ...         return ([0.0],)
        >>> describe_workers(Batches(workers=4))
        '4 worker threads'
    """
    workers = int(py_dataset.workers or 0)
    if py_dataset.use_multiprocessing and workers > 0:
        return f"{workers} worker process" + ("es" if workers > 1 else "")
    if workers > 1:
        return f"{workers} worker threads"
    return "no workers"


@contextlib.contextmanager
def keras_dataset(py_dataset: keras.utils.PyDataset) -> Iterator[Any]:
    """The ``tf.data.Dataset`` Keras's ``fit`` makes of ``py_dataset``, workers included.

    Args:
        py_dataset: A ``keras.utils.PyDataset``; its batches in index order (no shuffle).

    Yields:
        An endless ``tf.data.Dataset`` of its batches as ``fit`` receives them (``(x,)`` is
        given as ``x``), pass after pass (:class:`EndlessPyDataset`): one stream from one
        enqueuer, which each new iterator continues (Keras's per-pass enqueuer waits
        forever once an iterator is dropped mid-pass). Its worker threads or processes are
        stopped when the block ends.

    Raises:
        TypeError: If ``py_dataset`` is not a ``keras.utils.PyDataset``.
        ValueError: If it has no batches.
    """
    if not is_py_dataset(py_dataset):
        raise TypeError(
            "`dataset` must be a keras.utils.PyDataset here. "
            f"Received: dataset={py_dataset!r} of type {type(py_dataset).__name__}"
        )
    if py_dataset.num_batches == 0:
        raise ValueError(f"`dataset` has no batch. Received: dataset={py_dataset!r} (len 0)")
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    endless = py_dataset if py_dataset.num_batches is None else EndlessPyDataset(py_dataset)
    adapter = PyDatasetAdapter(endless, shuffle=False)
    dataset = adapter.get_tf_dataset().map(_unwrap_single)
    _MADE_HERE[dataset] = describe_workers(py_dataset)
    try:
        yield dataset
    finally:
        if adapter.enqueuer is not None:
            adapter.enqueuer.stop()


def _unwrap_single(*batch):
    """Keras standardises ``x`` alone to ``(x,)`` and unpacks it again before ``train_step``."""
    return batch[0] if len(batch) == 1 else batch


class EndlessPyDataset(keras.utils.PyDataset):
    """``py_dataset`` repeated without end, with its workers, for ``fit(steps_per_epoch=N)``.

    Batch ``i`` is the wrapped PyDataset's batch ``i % len(py_dataset)``, so every run sees
    the same batches in the same order.

    Example:
        >>> class Batches(keras.utils.PyDataset):
        ...     def __len__(self):
        ...         return 3
        ...     def __getitem__(self, index):
        ...         return ([float(index)],)
        >>> endless = EndlessPyDataset(Batches())
        >>> endless.num_batches is None, endless[4]
        (True, ([1.0],))
    """

    def __init__(self, py_dataset: keras.utils.PyDataset) -> None:
        super().__init__(
            workers=py_dataset.workers,
            use_multiprocessing=py_dataset.use_multiprocessing,
            max_queue_size=py_dataset.max_queue_size,
        )
        self.py_dataset = py_dataset
        self._length = int(py_dataset.num_batches)

    @property
    def num_batches(self) -> None:
        return None

    def __getitem__(self, index: int) -> Any:
        return self.py_dataset[index % self._length]
