"""The generations checker on hand-written histories: which save a load read, and a mix is FAIL."""

import pytest

from resilience.checkers import FAIL, NA, PASS, Evidence, Generations, LoadRecord, SaveRecord
from resilience.state import Topology
from resilience.vocab.combos import Combination

T = Topology(2, 1, 1)


def ev(saves, loads, corruptions=()):
    return Evidence(
        Combination.parse("GLOBAL/torch_dist/sync"), T, saves, loads, list(corruptions), [], [], lambda it: "fp"
    )


def save(it, generation, status="ok", index=None, rng=None):
    return SaveRecord(
        0,
        it,
        str(T),
        "fp",
        rng or f"rng{generation}",
        status,
        index if index is not None else generation,
        f"0.{generation}",
        generation=generation,
    )


def load(it, found, index=100, rng=None, rng_restored=False, pieces=None, topology=str(T)):
    gens = {"found": found, **({"pieces": pieces} if pieces else {})}
    return LoadRecord(1, topology, "ok", index, it, "fp", rng, rng_restored, generations=gens)


@pytest.mark.parametrize(
    "saves, loads, status, problem",
    [
        # one save read whole
        ([save(2, 1), save(3, 2)], [load(3, [2])], PASS, ""),
        # a re-save (B) of iteration 3 that crashed: reading the first save (A) whole is right
        ([save(3, 1), save(3, 2, "info")], [load(3, [1])], PASS, ""),
        # the re-save was acknowledged and read whole
        ([save(3, 1), save(3, 2)], [load(3, [2])], PASS, ""),
        # pieces of both saves of iteration 3
        (
            [save(3, 1), save(3, 2, "info")],
            [load(3, [1, 2], pieces={"1": ["output_layer.weight"], "2": ["x"]})],
            FAIL,
            "a mix of saves",
        ),
        # pieces of an older iteration's save inside the newer one
        ([save(2, 1), save(3, 2)], [load(3, [1, 2])], FAIL, "a mix of saves"),
        # a generation no save wrote (a stamp lost or left at its initial value)
        ([save(3, 1)], [load(3, [0])], FAIL, "no save wrote"),
        # the whole state of iteration 2's save handed out as iteration 3
        ([save(2, 1), save(3, 2)], [load(3, [1])], FAIL, "loaded as 3"),
        # the re-save was acknowledged before the load, yet the load read the earlier save
        ([save(3, 1, index=1), save(3, 2, index=2)], [load(3, [1], index=10)], FAIL, "later one was acknowledged"),
        # tensors of save B, RNG of save A
        ([save(3, 1), save(3, 2)], [load(3, [2], rng="rng1", rng_restored=True)], FAIL, "the RNG is not"),
        # another tp: an RNG reported restored is resume equivalence's to judge, not a mix
        ([save(3, 1), save(3, 2)], [load(3, [2], rng="rng1", rng_restored=True, topology="tp1pp1dp1")], PASS, ""),
    ],
)
def test_generations_verdicts(saves, loads, status, problem):
    v = Generations().check(ev(saves, loads))
    assert v.status == status, v
    if problem:
        assert problem in v.evidence[0]["problem"], v.evidence


def test_mix_evidence_names_each_save_and_its_pieces():
    pieces = {"1": ["output_layer.weight[55:101,0:32]"], "2": ["decoder.final_layernorm.weight"]}
    v = Generations().check(ev([save(3, 1), save(3, 2, "info")], [load(3, [1, 2], pieces=pieces)]))
    assert v.status == FAIL
    e = v.evidence[0]
    assert e["pieces"] == pieces and set(e["saves"]) == {"1", "2"} and e["saves"]["2"]["status"] == "info"


def test_earlier_save_may_be_read_when_the_resave_was_damaged():
    e = ev(
        [save(3, 1, index=1), save(3, 2, index=2)], [load(3, [1], index=10)], corruptions=[{"index": 5, "iteration": 3}]
    )
    assert Generations().check(e).status == PASS


def test_not_applicable_without_generations():
    assert (
        Generations()
        .check(ev([SaveRecord(0, 3, str(T), "fp", None, "ok", 1)], [LoadRecord(1, str(T), "ok", 9, 3, "fp")]))
        .status
        == NA
    )


def _history(load_found, resave_status="ok"):
    """Two ranks save iteration 3 twice (generations 1 and 2), then a load reports what it found."""
    from resilience.history import Event

    events = [Event("invoke", "job", "runner", {"job": 0, "topology": str(T)}, 0)]
    for gen, status in ((1, "ok"), (2, resave_status)):
        for rank in (0, 1):
            value = {"save_id": f"0.{gen}", "iteration": 3, "generation": gen}
            events.append(
                Event("invoke", "save", rank, dict(value, fingerprint="fp", rng=f"rng{gen}") if rank == 0 else value, 0)
            )
        for rank in (0, 1) if status == "ok" else (0,):
            events.append(Event("ok", "save", rank, {"save_id": f"0.{gen}", "iteration": 3}, 0))
    events.append(Event("invoke", "job", "runner", {"job": 1, "topology": str(T)}, 1))
    events.append(
        Event(
            "ok",
            "load",
            0,
            {
                "iteration": 3,
                "fingerprint": "fp",
                "rng": "rngX",
                "path": "iter_0000003",
                "topology": str(T),
                "generations": {"found": load_found},
            },
            1,
        )
    )
    return events


@pytest.mark.parametrize(
    "found, resave_status, status",
    [
        ([2], "ok", PASS),  # the acknowledged re-save, whole
        ([1], "info", PASS),  # the re-save returned on rank 0 only: the first save, whole, is right
        ([1], "ok", FAIL),  # the re-save was acknowledged on every rank, yet the first save came back
        ([1, 2], "info", FAIL),  # a mix
    ],
)
def test_generations_through_the_history_to_evidence_rule(found, resave_status, status):
    from resilience.runner.evidence import evidence_from

    e = evidence_from(
        _history(found, resave_status),
        combo=Combination.parse("GLOBAL/torch_dist/sync"),
        save_topology=T,
        never_stopped=lambda it: "fp",
    )
    assert [s.generation for s in e.saves] == [1, 2]
    assert Generations().check(e).status == status


def test_a_stamp_damaged_at_rest_is_integritys_failure_not_a_mix():
    """A flip that lands in a stamp: the loader returned damaged data (integrity FAIL), not a mix of saves."""
    from resilience.checkers import Integrity

    e = ev(
        [save(2, 1, index=1), save(3, 2, index=2)],
        [load(3, [2, -1], index=10)],
        corruptions=[{"index": 5, "iteration": 3}],
    )
    assert Generations().check(e).status == NA
    verdict = Integrity().check(e)
    assert verdict.status == FAIL and "stamp tensor" in verdict.evidence[0]["problem"]
    # without damage at rest the same load is a mix
    assert Generations().check(ev(e.saves, e.loads)).status == FAIL
