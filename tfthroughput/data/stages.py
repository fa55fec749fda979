"""A pipeline under construction: each step applies one ``tf.data`` transformation and records it.

:func:`tfthroughput.build_pipeline` is a sequence of such steps, so what
:func:`tfthroughput.describe_pipeline` reports is, by construction, what was called: the
method name and the keyword arguments it received, not a second account written beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tfthroughput.data.description import AUTOTUNE_TEXT, PipelineStage
from tfthroughput.data.guards import _checked

# Arguments where tf.data.AUTOTUNE (-1) means "tf.data picks"; elsewhere -1 is just a number.
_TUNABLE_ARGUMENTS = frozenset({"num_parallel_calls", "cycle_length", "buffer_size"})


class _PipelineSteps:
    """A ``tf.data.Dataset`` being built, and the stages applied to it so far, in order."""

    def __init__(self, dataset: tf.data.Dataset) -> None:
        self.dataset = dataset
        self.stages: list[PipelineStage] = []

    def apply(
        self,
        transformation: str,
        *functions: Callable[..., Any],
        function: str = "",
        reason: str = "",
        **arguments: Any,
    ) -> None:
        """Call ``dataset.<transformation>(*functions, **arguments)`` and record the stage.

        Args:
            transformation: The ``tf.data.Dataset`` method, e.g. ``"shuffle"``.
            *functions: Functions passed positionally (``map_func``); not shown as arguments.
            function: Name shown for the function, e.g. ``"preprocess_fn"``.
            reason: Why the stage is there, for the description.
            **arguments: Keyword arguments of the method, shown in the description.
        """
        self.dataset = getattr(self.dataset, transformation)(*functions, **arguments)
        self.stages.append(
            PipelineStage(
                transformation,
                function=function,
                arguments=tuple((name, _text(name, value)) for name, value in arguments.items()),
                reason=reason,
            )
        )

    def parallel_map(
        self,
        fn: Callable[..., Any],
        name: str,
        *,
        deterministic: bool,
        reason: str,
        same_structure: bool = False,
    ) -> None:
        """``map(fn)`` with ``num_parallel_calls=AUTOTUNE``, its result checked while traced."""
        self.apply(
            "map",
            _checked(fn, name, same_structure=same_structure),
            function=name,
            reason=reason,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )


def _text(name: str, value: Any) -> str:
    if name in _TUNABLE_ARGUMENTS and value == tf.data.AUTOTUNE:
        return AUTOTUNE_TEXT
    return repr(value) if isinstance(value, str) else str(value)


def _name(fn: Callable[..., Any]) -> str:
    """A user function's name as the description shows it."""
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
