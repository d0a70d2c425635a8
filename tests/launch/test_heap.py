"""launch.heap: the command keeps what it loaded out of later collections; nobody else is touched."""

import gc

import pytest

from resilience.launch import heap


@pytest.fixture
def managed(monkeypatch):
    monkeypatch.setattr(heap, "_managed", True)
    yield
    gc.unfreeze()


def test_what_loaded_is_kept_out_of_later_collections(managed):
    gc.unfreeze()
    with heap.loading():
        assert not gc.isenabled()  # no collection while it loads
        loaded = [[] for _ in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() >= len(loaded)
    assert not any(loaded[0] is o for o in gc.get_objects())  # out of the collector's sight


def test_a_collector_that_was_off_stays_off(managed):
    gc.disable()
    try:
        with heap.loading():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_process_that_only_imports_the_package_keeps_its_collector():
    before = gc.get_freeze_count()
    with heap.loading():
        assert gc.isenabled()
    heap.leaving()
    assert gc.get_freeze_count() == before
