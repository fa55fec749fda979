"""The searches' garbage collections scan only what the search made (``gc.freeze`` around
tune's and find_batch_size's): what they still collect, what waits until after, and a
program's own freeze left alone."""

from __future__ import annotations

import gc
import weakref

import pytest

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


def test_a_cycle_made_inside_is_collected_inside_and_one_made_before_waits(nothing_frozen):
    before = _cycle()  # garbage already: frozen with the rest, so no collection inside sees it
    with collections_of_new_objects_only():
        assert gc.get_freeze_count() > 0
        inside = _cycle()
        gc.collect()
        assert inside() is None  # a trial's model, made in the search, is still freed
        assert before() is not None
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert before() is None  # handed back to the collector after the search


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
