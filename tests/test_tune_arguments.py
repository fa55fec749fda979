"""tuning/_arguments.py: tune's bad arguments get one-line errors that name the argument and the
value received, raised before any trial runs. Re-run under Keras's JAX backend with TensorFlow
blocked (tests/test_tune_backends.py)."""

from __future__ import annotations

import keras
import pytest
from tiny_models import arrays, tiny_mlp

from tfthroughput.tuning import tune


def test_bad_arguments_get_one_line_errors_naming_the_argument():
    model = tiny_mlp()
    with pytest.raises(TypeError, match=r"`build_model` must be a zero-argument .* not a model"):
        tune(model, arrays())
    with pytest.raises(TypeError, match=r"`data` must be what model.fit takes.*Received: data="):
        tune(tiny_mlp, "train.csv")
    with pytest.raises(TypeError, match=r"`data` must be what model.fit takes"):
        tune(tiny_mlp, [1, 2, 3])
    with pytest.raises(
        ValueError,
        match=r"`time_budget` must be a positive number of seconds. "
        r"Received: time_budget=0",
    ):
        tune(tiny_mlp, arrays(), time_budget=0)
    with pytest.raises(ValueError, match=r"`rounds` must be at least 2"):
        tune(tiny_mlp, arrays(), rounds=1)
    with pytest.raises(ValueError, match=r"`batch_size` must not exceed the 1024 examples"):
        tune(tiny_mlp, arrays(), batch_size=4096)
    with pytest.raises(TypeError, match=r"`build_model` must return a compiled keras.Model"):
        tune(lambda: "not a model", arrays(), time_budget=5)
    uncompiled = lambda: keras.Sequential([keras.Input((16,)), keras.layers.Dense(1)])  # noqa: E731
    with pytest.raises(ValueError, match=r"call model.compile"):
        tune(uncompiled, arrays(), time_budget=5)


def test_confirm_rounds_is_checked():
    with pytest.raises(ValueError, match=r"`confirm_rounds` must be at least 5.*confirm_rounds=3"):
        tune(tiny_mlp, arrays(), confirm_rounds=3)
    with pytest.raises(TypeError, match=r"confirm_rounds='5'"):
        tune(tiny_mlp, arrays(), confirm_rounds="5")
