"""Optimizer wrappers for the precision and memory trade-offs: loss scaling for float16, and
gradient accumulation when memory limits the batch size.
"""

from __future__ import annotations

from typing import Any

from tfthroughput._validation import check_positive_int


def loss_scale_optimizer(optimizer: Any, *, policy: Any = None) -> Any:
    """Wrap an optimizer in ``keras.optimizers.LossScaleOptimizer`` when float16 is in force.

    ``model.fit`` does this by itself under ``mixed_float16``; a custom training loop must do
    it and then call ``optimizer.scale_loss(loss)`` before taking gradients (Keras 3's
    ``apply`` unscales them and skips steps whose gradients are not finite).

    Args:
        optimizer: A Keras optimizer, or a name such as ``"adam"``.
        policy: The policy to decide for. Defaults to ``None``: Keras's global policy.
            A policy name or ``keras.DTypePolicy``.

    Returns:
        A ``LossScaleOptimizer`` around ``optimizer`` when the policy computes in float16;
        otherwise ``optimizer`` itself (resolved from its name). An optimizer that is already
        a ``LossScaleOptimizer`` is returned as is.

    Example:
        >>> import keras
        >>> from tfthroughput import mixed_precision
        >>> with mixed_precision("mixed_float16"):
        ...     optimizer = loss_scale_optimizer(keras.optimizers.SGD(0.1))
        >>> type(optimizer).__name__
        'LossScaleOptimizer'
    """
    import keras

    optimizer = keras.optimizers.get(optimizer)
    if policy is None:
        policy = keras.config.dtype_policy()
    elif isinstance(policy, str):
        policy = keras.DTypePolicy(policy)
    elif not isinstance(policy, keras.DTypePolicy):
        raise TypeError(
            "`policy` must be None, a policy name or a keras.DTypePolicy. "
            f"Received: policy={policy!r} (of type {type(policy).__name__})"
        )
    if policy.compute_dtype != "float16" or isinstance(
        optimizer, keras.optimizers.LossScaleOptimizer
    ):
        return optimizer
    return keras.optimizers.LossScaleOptimizer(optimizer)


def with_gradient_accumulation(optimizer: Any, gradient_accumulation_steps: int) -> Any:
    """A copy of an optimizer that accumulates gradients over that many batches.

    Uses Keras 3's own ``gradient_accumulation_steps`` option: variables are updated every
    ``gradient_accumulation_steps`` batches with the mean gradient, so a batch of ``b`` trains
    like one of ``b * gradient_accumulation_steps`` when memory (e.g. after moving to a larger
    model) limits ``b``. Learning-rate schedules then count optimizer updates, not batches.

    Args:
        optimizer: A Keras optimizer that has not been built yet (its accumulators are
            created when it is built), or a name such as ``"adam"``. A
            ``LossScaleOptimizer`` has its inner optimizer rebuilt.
        gradient_accumulation_steps: Batches per update (Keras's own name); ``1`` means no
            accumulation.

    Returns:
        A new optimizer of the same class and configuration, with
        ``gradient_accumulation_steps`` set.

    Raises:
        ValueError: If ``gradient_accumulation_steps`` is not a positive int, or ``optimizer``
            is already built.

    Example:
        >>> import keras
        >>> adam = keras.optimizers.Adam(1e-3)
        >>> optimizer = with_gradient_accumulation(adam, gradient_accumulation_steps=4)
        >>> optimizer.gradient_accumulation_steps  # compile with it: batch 64 trains like 256
        4
    """
    import keras

    check_positive_int("gradient_accumulation_steps", gradient_accumulation_steps)
    optimizer = keras.optimizers.get(optimizer)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        inner = with_gradient_accumulation(optimizer.inner_optimizer, gradient_accumulation_steps)
        config = optimizer.get_config()
        return keras.optimizers.LossScaleOptimizer(
            inner,
            initial_scale=config["initial_scale"],
            dynamic_growth_steps=config["dynamic_growth_steps"],
            name=optimizer.name,
        )
    if optimizer.built:
        raise ValueError(
            "`optimizer` must not be built yet: gradient accumulators are created when it is "
            f"built. Received: optimizer={optimizer.name!r} (built=True). Pass a fresh "
            "optimizer, before model.compile()/fit()."
        )
    config = optimizer.get_config()
    steps = gradient_accumulation_steps
    config["gradient_accumulation_steps"] = steps if steps > 1 else None
    return type(optimizer).from_config(config)
