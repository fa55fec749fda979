"""XLA helpers: compile kwargs, a scoped auto-clustering switch, and a jit decorator that fails
clearly (or falls back) when XLA cannot compile a function.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfthroughput._optional import import_tensorflow

# Fragments of the messages TensorFlow raises when XLA cannot compile a graph (unsupported op,
# shape that must be known at compile time, ...), as opposed to errors of the computation.
_XLA_FAILURE_MARKERS = (
    "Detected unsupported operations when trying to compile graph",
    "tf2xla conversion failed",
    "must be a compile-time constant",
    "XLA compilation",
    "XLA can't",
    "_XlaMustCompile",
    "XLA_CPU_JIT",
    "XLA_GPU_JIT",
)

# The XLA flag that lets auto-clustering compile CPU ops (it clusters only GPU ops otherwise).
_CPU_JIT_FLAG = "--tf_xla_cpu_global_jit"


class XlaCompilationError(RuntimeError):
    """XLA could not compile a function decorated with :func:`jit_compile`."""


def xla_compile_kwargs(enabled: bool | str = True) -> dict[str, bool]:
    """Keyword arguments for ``model.compile`` that switch XLA on (or off).

    Keras 3 compiles ``model.fit``'s train step with XLA by default only when a GPU or TPU is
    present (``jit_compile="auto"``); on a CPU, or to be explicit, pass these.

    Args:
        enabled: Defaults to ``True``. ``False`` forces XLA off; ``"auto"`` follows
            :func:`tfthroughput.recommend_precision`'s ``xla`` decision for this machine.

    Returns:
        ``{"jit_compile": <bool>}``.

    Raises:
        TypeError: If ``enabled`` is neither a bool nor a string.
        ValueError: If ``enabled`` is a string other than ``"auto"``.

    Example:
        >>> xla_compile_kwargs()
        {'jit_compile': True}
        >>> model.compile(optimizer="adam", loss="mse", **xla_compile_kwargs())  # doctest: +SKIP
    """
    if isinstance(enabled, str):
        if enabled != "auto":
            raise ValueError(
                f"`enabled` must be True, False or 'auto'. Received: enabled={enabled!r}"
            )
        from tfthroughput.precision.precision_recommendation import recommend_precision

        return {"jit_compile": recommend_precision().xla}
    if not isinstance(enabled, bool):
        raise TypeError(
            "`enabled` must be True, False or 'auto'. "
            f"Received: enabled={enabled!r} (of type {type(enabled).__name__})"
        )
    return {"jit_compile": enabled}


@dataclass(frozen=True)
class JitChange:
    """A change of TensorFlow's global XLA auto-clustering, made by :func:`xla_auto_clustering`.

    Already in force when this object exists; as a context manager it restores the previous
    setting on exit (also on exceptions). :meth:`restore` does the same by hand.

    Attributes:
        previous: Whether auto-clustering was on before.
        current: Whether it is on now.
    """

    previous: bool
    current: bool

    @property
    def changed(self) -> bool:
        """Whether the setting differs from the one before."""
        return self.previous != self.current

    def restore(self) -> None:
        """Put back the previous setting."""
        _set_auto_clustering(self.previous)

    def __enter__(self) -> JitChange:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()

    def __str__(self) -> str:
        def word(on: bool) -> str:
            return "on" if on else "off"

        if not self.changed:
            return f"XLA auto-clustering unchanged: {word(self.current)}"
        return f"XLA auto-clustering: {word(self.previous)} -> {word(self.current)}"


def _auto_clustering_enabled() -> bool:
    tf = import_tensorflow("tfthroughput.precision.xla_auto_clustering")

    return tf.config.optimizer.get_jit() == "autoclustering"


def _set_auto_clustering(enabled: bool) -> None:
    tf = import_tensorflow("tfthroughput.precision.xla_auto_clustering")

    # `False`, not "": TensorFlow's documented off value.
    tf.config.optimizer.set_jit("autoclustering" if enabled else False)


def _cpu_clustering_flag_set(xla_flags: str) -> bool:
    """Whether ``TF_XLA_FLAGS`` lets auto-clustering compile ops placed on the CPU."""
    for token in xla_flags.split():
        name, _, value = token.partition("=")
        if name == _CPU_JIT_FLAG:
            return value.lower() not in ("false", "0")
    return False


def _warn_if_nothing_to_cluster() -> None:
    tf = import_tensorflow("tfthroughput.precision.xla_auto_clustering")

    if tf.config.list_physical_devices("GPU") or _cpu_clustering_flag_set(
        os.environ.get("TF_XLA_FLAGS", "")
    ):
        return
    warnings.warn(
        "XLA auto-clustering is on, but TensorFlow clusters only GPU ops unless "
        f"TF_XLA_FLAGS={_CPU_JIT_FLAG} is set before TensorFlow starts, and no GPU is "
        "visible: nothing will be compiled. Set that variable to compile on the CPU, or use "
        "jit_compile=True (xla_compile_kwargs(), @jit_compile), which compiles on any device.",
        UserWarning,
        stacklevel=3,
    )


def xla_auto_clustering(enabled: bool = True) -> JitChange:
    """Switch TensorFlow's global XLA auto-clustering; scoped when used in a ``with`` block.

    Auto-clustering (``tf.config.optimizer.set_jit``) lets TensorFlow compile clusters of ops
    inside every ``tf.function`` with XLA, without ``jit_compile=True``. It is process-global,
    so the switch returns a :class:`JitChange` that puts the previous setting back.
    Functions already traced keep the setting they were traced with.

    TensorFlow clusters only ops placed on a GPU unless ``TF_XLA_FLAGS=--tf_xla_cpu_global_jit``
    is set before it starts; turning auto-clustering on without a GPU and without that flag
    would change nothing, so it warns.

    Args:
        enabled: Defaults to ``True``: turn auto-clustering on. ``False`` turns it off.

    Returns:
        A :class:`JitChange`, usable as a context manager.

    Raises:
        TypeError: If ``enabled`` is not a bool.

    Warns:
        UserWarning: When turning it on with no GPU visible and without the CPU flag.

    Example:
        >>> with xla_auto_clustering():  # doctest: +SKIP
        ...     model.fit(dataset, epochs=1)  # a new train function, traced with clustering
        >>> print(xla_auto_clustering(False))  # one-shot
        XLA auto-clustering unchanged: off
    """
    if not isinstance(enabled, bool):
        raise TypeError(
            f"`enabled` must be a bool. Received: enabled={enabled!r} "
            f"(of type {type(enabled).__name__})"
        )
    previous = _auto_clustering_enabled()
    _set_auto_clustering(enabled)
    if enabled:
        _warn_if_nothing_to_cluster()
    return JitChange(previous=previous, current=enabled)


def is_xla_failure(error: BaseException) -> bool:
    """Whether ``error`` is XLA refusing or failing to compile (an op it cannot cluster, a
    dynamic shape), as told by the markers in its message; ``jit_compile``'s fallback and
    ``tune``'s XLA trials both use it to tell a compilation failure from a bug in the model.
    """
    message = str(error)
    return any(marker in message for marker in _XLA_FAILURE_MARKERS)


def jit_compile(
    fn: Callable[..., Any] | None = None,
    *,
    fallback: bool = False,
    **function_kwargs: Any,
) -> Any:
    """Decorate a function as ``tf.function(jit_compile=True)``, failing clearly.

    When XLA cannot compile the function (an op XLA does not support, such as
    ``tf.numpy_function``, or a shape that must be known at compile time), TensorFlow raises a
    long ``InvalidArgumentError``. This raises :class:`XlaCompilationError` instead, saying
    what to do; or, with ``fallback=True``, warns once and runs (from then on) the same
    function as a plain ``tf.function``. Errors of the computation itself pass through.

    Args:
        fn: The function to compile. Use ``@jit_compile`` or ``@jit_compile(fallback=True)``.
        fallback: Defaults to ``False``: raise on an XLA failure. ``True``: warn and fall back
            to the non-XLA ``tf.function``.
        **function_kwargs: Passed to ``tf.function`` (e.g. ``reduce_retracing=True``), for
            both the XLA and the fallback version.

    Returns:
        The decorated callable. Its ``uses_xla`` attribute tells whether calls still go
        through XLA (``False`` once it has fallen back).

    Raises:
        TypeError: If ``jit_compile`` is passed in ``function_kwargs``.
        XlaCompilationError: When called, if XLA fails and ``fallback`` is ``False``.

    Example:
        >>> @jit_compile(fallback=True)
        ... def train_step(x, y):
        ...     ...
    """
    if "jit_compile" in function_kwargs:
        raise TypeError(
            "`jit_compile` is set by this decorator; do not pass it. "
            f"Received: jit_compile={function_kwargs['jit_compile']!r}"
        )
    if fn is None:
        return functools.partial(jit_compile, fallback=fallback, **function_kwargs)
    return _JitFunction(fn, fallback, function_kwargs)


class _JitFunction:
    """Callable returned by :func:`jit_compile`."""

    def __init__(
        self, fn: Callable[..., Any], fallback: bool, function_kwargs: dict[str, Any]
    ) -> None:
        tf = import_tensorflow("tfthroughput.jit_compile")

        self._python_function = fn
        self._fallback = fallback
        self._function_kwargs = function_kwargs
        self._function = tf.function(fn, jit_compile=True, **function_kwargs)
        self.uses_xla = True
        functools.update_wrapper(self, fn)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        # Decorating a method: bind `self` like a plain function would (tf.function traces
        # once per instance, as it does for its own decorated methods).
        if instance is None:
            return self
        return functools.partial(self, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import tensorflow as tf

        if not self.uses_xla:
            return self._function(*args, **kwargs)
        try:
            return self._function(*args, **kwargs)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as error:
            if not is_xla_failure(error):
                raise
            name = getattr(self._python_function, "__qualname__", repr(self._python_function))
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            if not self._fallback:
                raise XlaCompilationError(
                    f"XLA could not compile {name}(): {first_line}\n"
                    "Remove or replace the unsupported op (Python callbacks such as "
                    "tf.numpy_function/tf.py_function, string ops and ops whose output shape "
                    "depends on data cannot be compiled), or decorate with "
                    "jit_compile(fallback=True) to run it without XLA."
                ) from error
            warnings.warn(
                f"XLA could not compile {name}(); running it as a plain tf.function "
                f"instead. Cause: {first_line}",
                RuntimeWarning,
                stacklevel=2,
            )
            self._function = tf.function(self._python_function, **self._function_kwargs)
            self.uses_xla = False
            return self._function(*args, **kwargs)
