"""Checkers on hand-made evidence: each fails on the evidence it exists to catch."""

from resilience.checkers import (
    ALL,
    FAIL,
    NA,
    PASS,
    REFUSED,
    UNKNOWN,
    AtomicCommit,
    Durability,
    Evidence,
    Integrity,
    LoadRecord,
    ResumeEquivalence,
    SaveRecord,
    TopologyIndependence,
    run_checker,
)
from resilience.state import Topology
from resilience.vocab.combos import Combination

T = Topology(2, 1, 1)


def fp(i):
    return f"fp{i}"


def ev(saves, loads, combo="GLOBAL/torch_dist/sync", corruptions=()):
    return Evidence(Combination.parse(combo), T, saves, loads, list(corruptions), [], [], fp)


def save(it, status="ok", index=None, f=None):
    return SaveRecord(0, it, str(T), f or fp(it), "rng", status, index if index is not None else it)


def load(it, index=100, f=None, topology=str(T), **kw):
    return LoadRecord(1, topology, "ok", index, it, f or fp(it), "rng", **kw)


def test_all_pass_on_a_clean_resume():
    e = ev([save(2), save(3)], [load(3, continued=[(5, fp(5))])])
    statuses = {v.checker: v.status for v in (run_checker(c, e) for c in ALL)}
    assert statuses == {
        "atomic_commit": PASS,
        "durability": PASS,
        "integrity": NA,
        "resume_equivalence": PASS,
        "topology_independence": NA,
        "saves": PASS,
        "generations": NA,
        "exceptions": NA,
        "symmetry": NA,
        "precision": NA,
        "recovery": NA,
        "hang": NA,
        "retention": NA,  # no file operation log
    }


def test_atomic_commit_fails_on_a_torn_state():
    assert AtomicCommit().check(ev([save(2), save(3, "info")], [load(3, f="mixed")])).status == FAIL


def test_durability_fails_when_an_acknowledged_save_is_lost():
    v = Durability().check(ev([save(2), save(3)], [load(2)]))
    assert v.status == FAIL and v.evidence[0]["acknowledged"] == 3


def test_durability_allows_skipping_an_unacknowledged_save():
    assert Durability().check(ev([save(2), save(3, "info")], [load(2)])).status == PASS


def test_durability_allows_falling_back_from_a_damaged_checkpoint():
    e = ev([save(2), save(3)], [load(2, index=100)], corruptions=[{"index": 50, "iteration": 3}])
    assert Durability().check(e).status == PASS


def test_integrity_fails_when_damage_loads_as_wrong_values():
    e = ev([save(2), save(3)], [load(3, f="wrong")], corruptions=[{"index": 50, "iteration": 3}])
    assert Integrity().check(e).status == FAIL


def test_integrity_fails_when_a_load_ran_code_planted_in_the_checkpoint(tmp_path):
    """A load with right values still fails once the planted command's marker exists."""
    marker = tmp_path / "HOSTILE_PICKLE_RAN"
    e = ev(
        [save(2), save(3)],
        [load(3, index=100)],
        corruptions=[{"index": 50, "iteration": 3, "rel": "iter_0000003/.metadata", "marker": str(marker)}],
    )
    assert Integrity().check(e).status == PASS  # the damage missed what was read: no marker, no code ran
    marker.write_text("ran\nran\n")
    verdict = Integrity().check(e)
    assert verdict.status == FAIL and "ran code planted" in verdict.detail and "2 runs" in verdict.detail


def test_integrity_is_na_when_the_damage_changed_nothing_the_load_returned():
    """A flip the loader read past without a warning and without a wrong value probed nothing: never PASS."""
    e = ev([save(2), save(3)], [load(3)], corruptions=[{"index": 50, "iteration": 3, "rel": "iter_0000003/x.pt"}])
    verdict = Integrity().check(e)
    assert verdict.status == NA and "changed no value the load returns" in verdict.detail


def test_integrity_fails_when_damage_restores_a_wrong_rng_state():
    e = ev([save(2), save(3)], [load(3, rng_restored=True)], corruptions=[{"index": 50, "iteration": 3}])
    e.loads[0].rng = "another rng"
    verdict = Integrity().check(e)
    assert verdict.status == FAIL and "wrong RNG" in verdict.evidence[0]["problem"]


def test_integrity_passes_on_fallback_and_on_refusal():
    e = ev(
        [save(2), save(3)],
        [load(2, warnings=["checksum failed"]), LoadRecord(2, str(T), "fail", 101, error="IntegrityError: x")],
        corruptions=[{"index": 50, "iteration": 3}],
    )
    assert Integrity().check(e).status == PASS


def test_resume_fails_when_continued_training_diverges():
    assert ResumeEquivalence().check(ev([save(3)], [load(3, continued=[(5, "other")])])).status == FAIL


def test_resume_fails_on_rng_claimed_across_a_tp_change():
    e = ev([save(3)], [load(3, topology="tp1pp1dp1", rng_restored=True)])
    assert ResumeEquivalence().check(e).status == FAIL


def test_topology_classifies_refusals_against_the_table():
    refused = LoadRecord(1, "tp1pp1dp1", "fail", 100, error="TopologyChangeRefused: tp 2 -> 1", refused=True)
    assert TopologyIndependence().check(ev([save(3)], [refused], "LEGACY/torch/sync")).status == REFUSED
    assert TopologyIndependence().check(ev([save(3)], [refused], "GLOBAL/torch_dist/sync")).status == FAIL
    wrong = load(3, f="garbage", topology="tp1pp1dp1")
    assert TopologyIndependence().check(ev([save(3)], [wrong])).status == FAIL
    assert TopologyIndependence().check(ev([save(3)], [load(3, topology="tp1pp1dp1")])).status == PASS


def test_a_crashing_checker_is_unknown_never_pass():
    class Broken:
        name = "broken"

        def check(self, e):
            raise RuntimeError("bug in the checker")

    v = run_checker(Broken(), ev([], []))
    assert v.status == UNKNOWN and "bug in the checker" in v.detail
