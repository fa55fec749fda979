"""The searches' garbage collections scan only what the search made (``gc.freeze`` around
tune's and find_batch_size's): what they still collect, nothing frozen that was garbage, and
a program's own freeze left alone."""

from __future__ import annotations

import gc
import weakref

import pytest

from tfthroughput._collector import collector_paused
from tfthroughput.diagnosis.trial_memory import collections_of_new_objects_only


class _Node:
    """An object that can sit in a reference cycle, so only the collector frees it."""

    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref:
    """A two-node cycle that nothing else holds: garbage only a collection frees."""
    one, two = _Node(), _Node()
    one.other, two.other = two, one
    return weakref.ref(one)


@pytest.fixture
def nothing_frozen():
    gc.collect()
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()


def test_garbage_from_before_is_collected_not_frozen_and_the_blocks_own_before_it_ends(
    nothing_frozen,
):
    # Frozen, garbage would be freed in one heap at some allocation after the search, wherever
    # that lands (inside a user's fit, a dropped distributed iterator's functions among it).
    # The collector is paused, so only the block's own collections free anything here.
    with collector_paused():
        before = _cycle()
        with collections_of_new_objects_only():
            assert gc.get_freeze_count() > 0
            assert before() is None  # collected at the start, never frozen
            inside = _cycle()
            gc.collect()
            assert inside() is None  # a trial's model, made in the search, is still freed
            left = _cycle()
        assert left() is None  # the search's own, collected before the freeze is lifted
        assert gc.get_freeze_count() == 0


def test_a_programs_own_freeze_is_left_alone(nothing_frozen):
    gc.freeze()
    frozen = gc.get_freeze_count()
    with collections_of_new_objects_only():
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == frozen


def test_the_freeze_is_lifted_when_the_search_raises(nothing_frozen):
    with pytest.raises(RuntimeError, match="a trial failed"):
        with collections_of_new_objects_only():
            raise RuntimeError("a trial failed")
    assert gc.get_freeze_count() == 0
