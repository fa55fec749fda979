"""Set Keras's dtype policy (scoped or one-shot) and check a model built under it.

Keras's dtype policy is global state (per thread in Keras 3): a policy set for one experiment
silently applies to every model built afterwards. :func:`mixed_precision` can always put the
previous one back. Which policy suits the hardware is decided in
:mod:`tfthroughput.precision.precision_recommendation`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tfthroughput.precision.precision_recommendation import (
    DeviceDescription,
    PrecisionRecommendation,
    recommend_precision,
)

_LOW_PRECISION = ("float16", "bfloat16")


@dataclass(frozen=True, eq=False)
class PolicyChange:
    """A change of Keras's global dtype policy, made by :func:`mixed_precision`.

    The change is already in force when this object exists. Use it as a context manager to
    undo the change on exit (also on exceptions), or call :meth:`restore` yourself.

    Attributes:
        previous: Name of the policy in force before, e.g. ``"float32"``.
        current: Name of the policy now in force, e.g. ``"mixed_bfloat16"``.
        recommendation: The :class:`PrecisionRecommendation` used when the policy was
            ``"auto"``, else ``None``.
    """

    previous: str
    current: str
    recommendation: PrecisionRecommendation | None
    _previous_policy: Any = field(repr=False)

    @property
    def changed(self) -> bool:
        """Whether the policy name differs from the one before."""
        return self.previous != self.current

    def restore(self) -> None:
        """Put back the exact policy object that was in force before."""
        import keras

        keras.config.set_dtype_policy(self._previous_policy)

    def __enter__(self) -> PolicyChange:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()

    def __str__(self) -> str:
        if not self.changed:
            return f"dtype policy unchanged: {self.current}"
        return f"dtype policy: {self.previous} -> {self.current}"


def mixed_precision(
    policy: Any = "auto",
    *,
    devices: Iterable[DeviceDescription] | None = None,
) -> PolicyChange:
    """Set Keras's global dtype policy; scoped when used in a ``with`` block.

    The call sets the policy at once and returns a :class:`PolicyChange` saying what changed.
    Used as a context manager, the previous policy (the same object) is restored on exit,
    also when the block raises. Policies apply to layers *created* while they are in force,
    so build the model inside the block; training it later keeps its dtypes. Keras keeps the
    policy per thread.

    Args:
        policy: Defaults to ``"auto"``: the policy :func:`recommend_precision` picks for the
            devices. Otherwise a Keras policy name (``"mixed_float16"``, ``"mixed_bfloat16"``,
            ``"float32"``, ...) or a ``keras.DTypePolicy``.
        devices: Only for ``"auto"``: the device descriptions to decide for. Defaults to
            ``None``: the devices TensorFlow sees.

    Returns:
        A :class:`PolicyChange` (``previous``, ``current``, ``recommendation``), usable as a
        context manager.

    Raises:
        ValueError: If ``policy`` is not a policy Keras knows, or ``devices`` is given
            without ``policy="auto"``.
        TypeError: If ``policy`` is neither a string nor a ``keras.DTypePolicy``.

    Example:
        >>> import keras
        >>> with mixed_precision("mixed_bfloat16"):  # scoped: build the model inside
        ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> model.layers[0].compute_dtype, keras.config.dtype_policy().name
        ('bfloat16', 'float32')
        >>> change = mixed_precision("mixed_float16")  # one-shot
        >>> print(change)
        dtype policy: float32 -> mixed_float16
        >>> change.restore()
        >>> t4 = DeviceDescription("GPU", "Tesla T4", (7, 5))
        >>> with mixed_precision("auto", devices=[t4]) as change:  # decided for a T4
        ...     print(change)
        dtype policy: float32 -> mixed_float16
    """
    import keras

    new_policy, recommendation = _policy_asked_for(policy, devices)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(new_policy)
    return PolicyChange(
        previous=previous.name,
        current=new_policy.name,
        recommendation=recommendation,
        _previous_policy=previous,
    )


def _policy_asked_for(policy: Any, devices: Any) -> tuple[Any, PrecisionRecommendation | None]:
    """The ``keras.DTypePolicy`` ``policy`` names, and for ``"auto"`` the recommendation
    that chose it."""
    import keras

    if isinstance(policy, str) and policy == "auto":
        recommendation = recommend_precision(devices)
        return keras.DTypePolicy(recommendation.policy), recommendation
    if devices is not None:
        raise ValueError(
            f"`devices` is only used with policy='auto'. Received: policy={policy!r}, "
            f"devices={devices!r}"
        )
    if isinstance(policy, keras.DTypePolicy):
        return policy, None
    if isinstance(policy, str):
        try:
            return keras.DTypePolicy(policy), None
        except ValueError as error:
            raise ValueError(
                "`policy` must be 'auto' or a Keras dtype policy name such as "
                f"'mixed_float16', 'mixed_bfloat16' or 'float32'. Received: policy={policy!r}"
            ) from error
    raise TypeError(
        "`policy` must be 'auto', a policy name or a keras.DTypePolicy. "
        f"Received: policy={policy!r} (of type {type(policy).__name__})"
    )


def check_mixed_precision_outputs(model: Any, *, strict: bool = False) -> tuple[str, ...]:
    """Check that a model's outputs are not computed in float16/bfloat16.

    A model built under a mixed policy computes its last layer in float16 or bfloat16 too.
    A softmax (or logits fed to a loss) in that precision is numerically unstable; the fix is
    to give the output layer ``dtype="float32"``, e.g. ``keras.layers.Activation("softmax",
    dtype="float32")``.

    Args:
        model: A built Keras model (functional, ``Sequential`` or subclassed).
        strict: Defaults to ``False``: warn (``UserWarning``). ``True``: raise instead.

    Returns:
        The names of the offending outputs (output layer names), empty if all is well.

    Raises:
        ValueError: In strict mode, if an output is float16/bfloat16, or if the model is not
            built yet (its outputs are unknown).

    Example:
        >>> import keras
        >>> with mixed_precision("mixed_bfloat16"):
        ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="logits")])
        >>> check_mixed_precision_outputs(model, strict=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Model ... has outputs computed in low precision: 'logits' (bfloat16). ...
    """
    offending = tuple(
        name for name, dtype in _output_dtypes(model) if _dtype_name(dtype) in _LOW_PRECISION
    )
    if offending:
        message = (
            f"Model {getattr(model, 'name', '')!r} has outputs computed in low precision: "
            + ", ".join(
                f"{name!r} ({_dtype_name(dtype)})"
                for name, dtype in _output_dtypes(model)
                if name in offending
            )
            + ". A softmax or logits in float16/bfloat16 is numerically unstable; build the "
            "output layer with dtype='float32', e.g. "
            "keras.layers.Activation('softmax', dtype='float32')."
        )
        if strict:
            raise ValueError(message)
        warnings.warn(message, UserWarning, stacklevel=2)
    return offending


def _output_dtypes(model: Any) -> list[tuple[str, Any]]:
    outputs = None
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):
        pass
    if outputs:
        return [(_producer_name(t), t.dtype) for t in outputs]
    # Subclassed models have no symbolic outputs: the last layer's compute dtype is the best
    # evidence of what the model returns.
    layers = getattr(model, "layers", None)
    if not getattr(model, "built", False) or not layers:
        raise ValueError(
            "`model` must be built (called on data or given an Input) so its outputs are "
            f"known. Received: model={getattr(model, 'name', model)!r} (built="
            f"{getattr(model, 'built', None)})"
        )
    return [(layers[-1].name, layers[-1].compute_dtype)]


def _producer_name(tensor: Any) -> str:
    history = getattr(tensor, "_keras_history", None)
    if history is not None:
        return history.operation.name
    return getattr(tensor, "name", "output")


def _dtype_name(dtype: Any) -> str:
    return getattr(dtype, "name", str(dtype))
