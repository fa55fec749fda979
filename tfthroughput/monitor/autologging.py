"""``tfthroughput.autolog()``: a ``GPUMonitor`` in every ``fit``, ``evaluate`` and ``predict``
of a Keras model, without editing the script that calls them.

It patches ``keras.Model`` (so Sequential, functional and subclassed models, and a subclass
whose own ``fit`` calls ``super().fit``) in the way MLflow's ``safe_patch`` does: a fault in the
patch's own code becomes one warning and the real call runs with the user's arguments; an error
of the call itself reaches the user unchanged; the user's callback list is copied, never
mutated; ``autolog(disable=True)`` puts back the very function objects that were there (or
removes the patch where the method was inherited). The calling of the patched methods is
:mod:`tfthroughput.monitor.keras_patch`'s; this module holds the settings and the run names.
"""

from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass, field

from tfthroughput._validation import check_bool
from tfthroughput.monitor import keras_patch
from tfthroughput.monitor.gpu_monitor import GPUMonitor

DEFAULT_LOG_DIR = os.path.join("logs", "tfthroughput")


@dataclass(frozen=True)
class MonitoredCall:
    """A run autolog gave a monitor: one ``fit``, or one model's ``evaluate`` (or ``predict``)
    calls.

    Attributes:
        kind: ``"fit"``, ``"evaluate"`` or ``"predict"``.
        name: Its run's name, e.g. ``"fit-2"``.
        log_dir: The folder its monitor wrote into (``<log_dir>/<name>`` is the run).
        own_monitor: Whether the call came with a ``GPUMonitor`` of its own (autolog added
            none; ``name`` and ``log_dir`` are that monitor's).
    """

    kind: str
    name: str
    log_dir: str
    own_monitor: bool = False

    @property
    def run_dir(self) -> str:
        """The folder of the call's event files (``evaluate`` and ``predict`` write one folder
        deeper, as a ``GPUMonitor`` passed to those calls does)."""
        base = os.path.join(self.log_dir, self.name)
        return base if self.kind == "fit" else os.path.join(base, self.kind)


@dataclass
class _Settings:
    log_dir: str
    options: dict
    calls: list[MonitoredCall] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Every monitor of the calls, held weakly: a run left open is held by its sampler thread.
    monitors: weakref.WeakSet = field(default_factory=weakref.WeakSet)
    # Each model's evaluate and predict monitors by (kind, log_dir), held weakly with the model.
    inference: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def monitor_for(self, kind: str, callbacks: list, model: object) -> GPUMonitor | None:
        """The monitor for one call, in a run folder named after the call: a new one for each
        ``fit``; for ``evaluate`` and ``predict`` the one of the model's earlier calls of that
        kind, if it is not measuring one now, so a loop of calls is one run with a step per
        call. None where the call has one (noted, so the call is still summarised)."""
        own = next((callback for callback in callbacks if isinstance(callback, GPUMonitor)), None)
        if own is not None:
            self._note_own(kind, own)
            self.monitors.add(own)
            return None
        with self.lock:
            log_dir = _tensorboard_log_dir(callbacks) or self.log_dir
            kept = self._kept(model, kind, log_dir)
            if kept is not None:
                return kept
            options = self.options
            taken = {call.name for call in self.calls if call.log_dir == log_dir}
            number = 1
            # A folder left by an earlier process is not written into again: its epochs would
            # mix with this call's in every reader. Not so on a multi-worker cluster, where the
            # workers share the folder and must name the same call alike (each writes its own
            # <run>/<task_type>_<index> in it, as GPUMonitor does there).
            while f"{kind}-{number}" in taken or (
                not _on_a_cluster() and os.path.exists(os.path.join(log_dir, f"{kind}-{number}"))
            ):
                number += 1
            call = MonitoredCall(kind, f"{kind}-{number}", log_dir)
            self.calls.append(call)
        monitor = GPUMonitor(log_dir=log_dir, run_name=call.name, **options)
        self.monitors.add(monitor)
        if kind != "fit":
            with self.lock:
                kept = self._model_monitors(model)
                if kept is not None:
                    kept[kind, log_dir] = monitor
        return monitor

    def _kept(self, model: object, kind: str, log_dir: str) -> GPUMonitor | None:
        """The model's monitor of its earlier ``kind`` calls into ``log_dir``, unless it is
        measuring one now (another thread's call gets a run of its own). Holds the lock."""
        kept = self._model_monitors(model) if kind != "fit" else None
        monitor = None if kept is None else kept.get((kind, log_dir))
        return None if monitor is None or monitor._measuring_a_call() else monitor

    def _model_monitors(self, model: object) -> dict | None:
        """The model's inference monitors by (kind, log_dir); None for a model that cannot be
        held weakly. Holds the lock."""
        try:
            return self.inference.setdefault(model, {})
        except TypeError:
            return None

    def _note_own(self, kind: str, monitor: GPUMonitor) -> None:
        call = MonitoredCall(kind, monitor.run_name, os.fspath(monitor.log_dir), own_monitor=True)
        with self.lock:
            # A monitor reused for several calls writes one run: listed once.
            if call not in self.calls:
                self.calls.append(call)


_settings: _Settings | None = None


def autolog(
    log_dir: str | os.PathLike = DEFAULT_LOG_DIR, disable: bool = False, **monitor_options
) -> None:
    """Give every Keras ``fit``, ``evaluate`` and ``predict`` from now on a ``GPUMonitor``.

    Each ``fit`` gets a new monitor, first in a copy of its callbacks, writing the run
    ``<log_dir>/fit-1`` (``fit-2``, ...; a number whose folder exists already is skipped); the
    ``evaluate`` calls of one model share one (``evaluate-1``, a step per call), and so do its
    ``predict`` calls (``predict-1``), so a loop of calls is one run. A call that has a
    ``keras.callbacks.TensorBoard`` writes beside it, in its ``log_dir``, so both show in one
    TensorBoard. A call that already has a ``GPUMonitor`` is left as it is, and so is the
    validation ``evaluate`` that ``fit`` runs inside itself. Calling ``autolog`` again keeps
    one patch and takes the new settings.

    Args:
        log_dir: Folder the runs go into. Defaults to ``"logs/tfthroughput"``.
        disable: Remove the patch, restoring Keras's own methods exactly. Defaults to False.
        **monitor_options: Passed to every ``GPUMonitor`` (``interval``, ``sinks``,
            ``update_freq``, ...); not ``run_name``, which autolog sets per call.

    Raises:
        TypeError, ValueError: For invalid arguments, as ``GPUMonitor`` raises them, before
            anything is patched.

    Example:
        >>> import tfthroughput
        >>> tfthroughput.autolog(log_dir="logs/tfthroughput")  # doctest: +SKIP
        >>> model.fit(x, y, epochs=3)  # writes logs/tfthroughput/fit-1  # doctest: +SKIP
    """
    global _settings
    if check_bool("disable", disable):
        keras_patch.unpatch()
        _settings = None
        return
    if "run_name" in monitor_options:
        raise TypeError(
            "autolog names each call's run itself; `run_name` cannot be given. "
            f"Received: run_name={monitor_options['run_name']!r}"
        )
    # Checked once here, where the user can fix them, not at every call.
    GPUMonitor(log_dir=log_dir, **monitor_options)
    if _settings is None:
        _settings = _Settings(os.fspath(log_dir), dict(monitor_options))
    else:  # autolog again: the same calls so far, the new settings from now on
        with _settings.lock:
            _settings.log_dir, _settings.options = os.fspath(log_dir), dict(monitor_options)
            _settings.inference.clear()  # the calls from now on get monitors of the new settings
    keras_patch.patch(_monitor_for_call)


def monitored_calls() -> tuple[MonitoredCall, ...]:
    """The runs of the calls autolog has seen since it was turned on, in the order of their
    first calls: those it gave a monitor (a model's calls of one kind share one), and those
    that came with their own (each such monitor once)."""
    return tuple(_settings.calls) if _settings is not None else ()


def finish_left_calls() -> None:
    """Write out now the runs of the calls left without their end hooks (an exception, Ctrl-C):
    their samplers would end them only at their next sample, up to ``interval`` later, and a
    reader of their files in the meantime (``tfthroughput run``'s summary) would miss records
    still queued, or the epoch cut short."""
    settings = _settings
    if settings is None:
        return
    with settings.lock:
        monitors = list(settings.monitors)
    for monitor in monitors:
        monitor._close_if_left()


def _monitor_for_call(kind: str, callbacks: list, model: object) -> GPUMonitor | None:
    settings = _settings
    return None if settings is None else settings.monitor_for(kind, callbacks, model)


def _on_a_cluster() -> bool:
    return bool(os.environ.get("TF_CONFIG"))


def _tensorboard_log_dir(callbacks: list) -> str | None:
    import keras

    for callback in callbacks:
        if isinstance(callback, keras.callbacks.TensorBoard):
            return os.fspath(callback.log_dir)
    return None
