"""Examples per step for inputs whose batch size Keras does not know: a ``PyDataset`` and a
Python generator, counted from the batches as they reach ``fit``.

Keras's data adapter knows the batch size of arrays (and ``GPUMonitor`` reads a ``tf.data``
pipeline's from its ``batch`` transformation), but for a ``keras.utils.PyDataset`` or a
generator its ``batch_size`` is ``None``: each batch is whatever the user's code returns, and
the last one of an epoch is often smaller. Keras hands every such batch, on the host and as
NumPy (or whatever the user yields), through one method of its adapter in this process, after
the ``PyDataset``'s workers (threads or processes) produced it: ``_standardize_batch`` for a
``PyDataset``, ``generator()`` for a generator. :class:`BatchCounter` wraps that method on
the adapter instance of one ``fit`` and counts the batches and the leading dimension of each
(its shape: no value is read, no device is synchronised). The wrapper is removed at the end of
the ``fit``, and it holds only a weak reference to the adapter.

Batches are produced a little ahead of training (Keras and tf.data prefetch a few), so the
epoch's examples per step is the mean over the batches counted during the epoch, multiplied by
the steps trained: exact when an epoch is one pass over the data, and off by the prefetch
depth's share of a partial batch at most otherwise.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from tfthroughput.monitor.fit_watch import fit_locals

# Adapter classes (Keras 3's trainers/data_adapters) and the method each sends batches through.
_COUNTED = {
    "PyDatasetAdapter": "_standardize_batch",
    "GeneratorDataAdapter": "generator",
}


def _leading_dimension(batch: object) -> int | None:
    """Examples in a batch: the first axis of its first array (``x``'s first input)."""
    first: Any = batch
    while isinstance(first, (tuple, list)) and first:
        first = first[0]
    if isinstance(first, dict) and first:
        return _leading_dimension(next(iter(first.values())))
    shape = getattr(first, "shape", None)
    if shape is None or not len(shape) or shape[0] is None:
        return None
    return int(shape[0])


class BatchCounter:
    """Counts the batches and examples one ``fit``'s adapter hands to Keras.

    Use :meth:`attach` on the ``fit``'s data adapter; read :meth:`take_epoch_batch_size` at
    each epoch's end; :meth:`detach` when the ``fit`` ends.

    Example:
        >>> import numpy as np
        >>> class PyDatasetAdapter:  # stands in for Keras's
        ...     def _standardize_batch(self, batch):
        ...         return batch
        >>> adapter = PyDatasetAdapter()
        >>> counter = BatchCounter.attach(adapter)
        >>> for size in (32, 32, 4):
        ...     _ = adapter._standardize_batch((np.zeros((size, 3)),))
        >>> counter.take_epoch_batch_size()
        22.666666666666668
        >>> counter.detach()
    """

    def __init__(self, adapter: object, method: str) -> None:
        self._adapter = weakref.ref(adapter)
        self._method = method
        # A generator adapter holds `generator` as an instance attribute: put that one back.
        self._own = vars(adapter).get(method)
        self._lock = threading.Lock()
        self._batches = 0
        self._examples = 0
        self.first_batch_size: int | None = None

    @classmethod
    def attach(cls, adapter: object) -> BatchCounter | None:
        """Start counting what ``adapter`` hands to Keras; ``None`` for an adapter whose
        batch size Keras knows, or one this cannot count."""
        method = _COUNTED.get(type(adapter).__name__)
        original = getattr(adapter, method, None) if method else None
        if not callable(original):
            return None
        counter = cls(adapter, method)
        counter.first_batch_size = _peeked_batch_size(adapter)
        wrapped = _counting_generator if method == "generator" else _counting_call
        setattr(adapter, method, wrapped(original, counter._count))
        return counter

    def _count(self, batch: object) -> None:
        size = _leading_dimension(batch)
        if size is None:
            return
        with self._lock:
            self._batches += 1
            self._examples += size
        if self.first_batch_size is None:
            self.first_batch_size = size

    def take_epoch_batch_size(self) -> float | None:
        """Mean examples per batch counted since the last call (``None`` if none was)."""
        with self._lock:
            batches, examples = self._batches, self._examples
            self._batches = self._examples = 0
        return examples / batches if batches else None

    def detach(self) -> None:
        """Put the adapter's own method back (it may already be gone with its ``fit``)."""
        adapter = self._adapter()
        if adapter is None or self._method not in vars(adapter):
            return
        if self._own is not None:
            setattr(adapter, self._method, self._own)
        else:
            delattr(adapter, self._method)  # the class's method shows through again
        self._own = None


def _counting_call(original: Callable, count: Callable[[object], None]) -> Callable:
    def standardize(batch):
        result = original(batch)
        count(result)
        return result

    return standardize


def _counting_generator(original: Callable, count: Callable[[object], None]) -> Callable:
    def generator() -> Iterator:
        for batch in original():
            count(batch)
            yield batch

    return generator


def attach_to_fit() -> BatchCounter | None:
    """A counter on the data adapter of the Keras ``fit`` on the calling thread's stack, where
    it feeds a ``PyDataset`` or a generator; else ``None``."""
    iterator = fit_locals("epoch_iterator").get("epoch_iterator")
    adapter = getattr(iterator, "data_adapter", None)
    return None if adapter is None else BatchCounter.attach(adapter)


def _peeked_batch_size(adapter: object) -> int | None:
    """The batch size of the batches Keras already looked at (to build its signature)."""
    peeked = getattr(adapter, "_first_batches", None)  # a generator's first batches
    if peeked:
        return _leading_dimension(peeked[0])
    signature = getattr(adapter, "_output_signature", None)  # a PyDataset's, from its batches
    return None if signature is None else _leading_dimension(signature)
