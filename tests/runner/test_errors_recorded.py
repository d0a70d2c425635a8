"""What the rank program records of a failed operation: the class (and its bases when it is not an
Exception), the errno by name, and what the library raised under an adapter's translation of it; and the
evidence keeps every rank's error of a failed load."""

import errno

from resilience.errors import IntegrityError, RankFailure
from resilience.history import Event
from resilience.runner.evidence import evidence_from
from resilience.runner.rankprog import error_of, library_error
from resilience.state import Topology
from resilience.vocab.combos import Combination


class LibraryAbort(BaseException):  # noqa: N818  (as libraries name theirs)
    pass


def _raised(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001  (the point: whatever it is)
        return e
    raise AssertionError("did not raise")


def _translate(inner: BaseException, suppress: bool):
    def fn():
        try:
            raise inner
        except BaseException as e:  # noqa: BLE001
            if suppress:
                raise IntegrityError("/ckpt/step-3", "dcp.load", "EOFError") from None
            raise RankFailure({1: repr(e)}, "save failed") from e

    return fn


def test_the_librarys_error_under_a_translation_is_recorded_with_its_class():
    e = _raised(_translate(LibraryAbort("writer gave up"), suppress=False))
    assert isinstance(library_error(e), LibraryAbort)
    out = error_of(e)
    assert out["class"] == "resilience.errors.RankFailure" and "not_exception" not in out
    assert out["raw"]["error"] == "LibraryAbort: writer gave up"
    assert out["raw"]["not_exception"][0].endswith("LibraryAbort")
    # `from None` hides it from tracebacks, not from the context it was raised in
    e = _raised(_translate(OSError(errno.ENOSPC, "No space left on device"), suppress=True))
    assert error_of(e)["raw"]["class"] == "builtins.OSError" and error_of(e)["errno"] == "ENOSPC"


def _library_raises():
    raise LibraryAbort("x")


def test_the_librarys_own_error_has_no_raw():
    e = _raised(_library_raises)
    assert library_error(e) is None
    out = error_of(e)
    assert "raw" not in out and out["not_exception"][0].endswith("LibraryAbort")


def test_every_ranks_error_of_a_failed_load_is_kept():
    events = [
        Event("invoke", "job", "runner", {"job": 1, "topology": "tp1pp1dp2"}, 1),
        Event("fail", "load", 1, {"error": "IntegrityError: iter_3/rank_1.pt: truncated"}, 1),
        Event("fail", "load", 0, {"error": "IntegrityError: another rank could not load", "raw": {"error": "E: y"}}, 1),
    ]
    ev = evidence_from(
        events,
        combo=Combination.parse("LOCAL/torch/sync"),
        save_topology=Topology.parse("tp1pp1dp2"),
        never_stopped=lambda i: "",
    )
    (ld,) = ev.loads
    assert ld.raw == {"error": "E: y"}
    assert ld.rank_errors == {
        1: "IntegrityError: iter_3/rank_1.pt: truncated",
        0: "IntegrityError: another rank could not load\nE: y",
    }


def test_a_split_load_fails_the_job_and_every_rank_is_heard():
    """Rank 0 loaded, rank 1 raised: the job's load failed with rank 1's error, the split is recorded, and a
    warning heard on rank 1 reaches the load's record."""
    events = [
        Event("invoke", "load", 0, {"topology": "tp1pp1dp2"}, 1),
        Event("invoke", "load", 1, {"topology": "tp1pp1dp2"}, 1),
        Event("fail", "load", 1, {"error": "IntegrityError: rank_1.pt: truncated", "captured": ["cast to bf16"]}, 1),
        Event("ok", "load", 0, {"iteration": 3, "peers_failed": [1], "topology": "tp1pp1dp2"}, 1),
    ]
    ev = evidence_from(
        events,
        combo=Combination.parse("GLOBAL/torch_dist/sync"),
        save_topology=Topology.parse("tp1pp1dp2"),
        never_stopped=lambda i: "",
    )
    (ld,) = ev.loads
    assert ld.status == "fail" and ld.error == "rank 1: IntegrityError: rank_1.pt: truncated"
    assert ev.load_splits == [{"job": 1, "ok": [0], "errors": {1: "IntegrityError: rank_1.pt: truncated"}}]
    assert ld.captured == ["rank 1: cast to bf16"]
