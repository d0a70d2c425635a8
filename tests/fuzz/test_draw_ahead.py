"""fuzz.speculation.draw_ahead: a forked child draws the examples the real pass will be given while this
process loads the backends; the list is the one drawing here gives, whatever happens to the child."""

import multiprocessing as mp
import os

import pytest
from hypothesis import given, seed, settings, strategies as st

from resilience.fuzz import speculation


def _as_test(strategy):
    def as_test(record):
        return seed(5)(settings(max_examples=25, database=None)(given(strategy)(record)))

    return as_test


def test_a_child_draws_the_same_examples_while_this_process_loads():
    as_test = _as_test(st.lists(st.integers(), max_size=4))
    here = speculation.draw_ahead(as_test)
    loaded, drawers = [], []

    def meanwhile():
        loaded.append(os.getpid())
        drawers.extend(mp.active_children())

    assert speculation.draw_ahead(as_test, meanwhile=meanwhile) == here and len(here) == 25
    assert loaded == [os.getpid()] and [p.name for p in drawers] == ["fuzz-draw"]  # it ran beside the child
    assert not mp.active_children()  # and the child is gone


@pytest.mark.parametrize("how", ["unpicklable", "child dies"])
def test_a_child_that_cannot_send_its_list_is_replaced_by_drawing_here(how):
    parent = os.getpid()

    def build(n):
        if how == "child dies" and os.getpid() != parent:
            os._exit(3)
        return (n, lambda: n) if how == "unpicklable" else n  # a lambda does not pickle

    as_test = _as_test(st.integers().map(build))
    drawn = speculation.draw_ahead(as_test, meanwhile=lambda: None)
    assert [d[0] if how == "unpicklable" else d for d in drawn] == [
        d[0] if how == "unpicklable" else d for d in speculation.draw_ahead(as_test)
    ]
    assert len(drawn) == 25 and not mp.active_children()
