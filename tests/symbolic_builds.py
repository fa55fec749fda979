"""Keras's symbolic build under a strategy, handed a batch instead of an iterator: shared by the
tests of tune under a strategy (tests/test_tune_strategy.py) and of the build from the input's
shapes (tests/test_tune_strategy_build.py)."""

from __future__ import annotations


def build_given(keras_build, batch, requests=None):
    """Keras's symbolic build (bound or not) handed ``batch`` instead of the epoch iterator it
    would make a throwaway iterator from; ``requests["for_the_build"]`` counts the builds
    Keras asked to make from an iterator."""

    def build(*model, iterator=None, data_batch=None):
        if requests is not None:
            requests["for_the_build"] += iterator is not None
        return keras_build(*model, data_batch=batch)

    return build
