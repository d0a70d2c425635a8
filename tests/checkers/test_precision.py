"""The precision checker on hand-written histories: each kind of load after a precision change gets its
verdict, the other checkers leave such loads to it, and it is N/A when no resume changed precision."""

from __future__ import annotations

import pytest

from resilience.checkers import ALL, FAIL, NA, PASS, REFUSED, UNKNOWN, PrecisionOnResume, run_checker
from resilience.checkers.evidence import PrecisionTargets
from resilience.history import Event
from resilience.runner.evidence import evidence_from
from resilience.state import Topology
from resilience.vocab.combos import Combination

T = "tp1pp1dp2"
LOST = "39519 of 39776 fp32 parameters changed, relative error up to 3.88e-03 (output_layer.weight)"


def _targets(iteration: int, saved: str, loaded: str) -> PrecisionTargets:
    return PrecisionTargets(
        f"exact{iteration}{loaded}", f"cast{iteration}{loaded}", LOST, lambda how, it: f"{how}-after{it}{loaded}"
    )


def _history(load: dict, *, saved="bf16", continued: tuple | None = None, corrupt=False) -> list[Event]:
    ev = [Event("invoke", "job", "runner", {"job": 0, "topology": T}, 0)]
    for r in (0, 1):
        ev.append(
            Event(
                "invoke",
                "save",
                r,
                {"save_id": "0.1", "iteration": 3, "dtype": saved, **({"fingerprint": "fp3"} if r == 0 else {})},
                0,
            )
        )
    ev += [Event("ok", "save", r, {"save_id": "0.1", "iteration": 3}, 0) for r in (0, 1)]
    if corrupt:
        ev.append(Event("ok", "corrupt", "runner", {"iteration": 3, "detail": "truncated"}, 0))
    ev.append(Event("invoke", "job", "runner", {"job": 1, "topology": T}, 1))
    ev.append(Event(load.pop("type", "ok"), "load", 0, {"topology": T, **load}, 1))
    if continued:
        ev.append(Event("ok", "continue", 0, {"iteration": continued[0], "fingerprint": continued[1]}, 1))
    return ev


def _judge(events, oracle=_targets) -> dict:
    ev = evidence_from(
        events,
        combo=Combination.parse("GLOBAL/torch_dist/sync"),
        save_topology=Topology.parse(T),
        never_stopped=lambda it: f"fp{it}",
        converted=oracle,
    )
    return {v.checker: v for v in (run_checker(c, ev) for c in ALL)}


CAST_WARNING = "log WARNING lib.ckpt: casting optimizer.main_param from torch.float32 to torch.bfloat16"
TABLE = [
    (
        "the exact conversion, training on as from it",
        {"iteration": 3, "fingerprint": "exact3fp32", "dtype": "fp32"},
        ("exact-after5fp32",),
        PASS,
        "LOADED-EXACT",
    ),
    (
        "a cast the implementation warned of, as a log record",
        {"iteration": 3, "fingerprint": "cast3fp32", "dtype": "fp32", "captured": [CAST_WARNING]},
        None,
        PASS,
        f"LOADED-CAST, precision lost: {LOST}, warned: {CAST_WARNING}",
    ),
    (
        "a cast the implementation warned of, in LoadResult.warnings",
        {"iteration": 3, "fingerprint": "cast3fp32", "dtype": "fp32", "warnings": ["parameters cast to fp32"]},
        None,
        PASS,
        "LOADED-CAST",
    ),
    (
        "a cast nobody was told of; a warning about something else does not count",
        {
            "iteration": 3,
            "fingerprint": "cast3fp32",
            "dtype": "fp32",
            "captured": ["warning FutureWarning: `load_state_dict` is deprecated"],
        },
        None,
        FAIL,
        f"CAST-SILENTLY, precision lost: {LOST}, no warning",
    ),
    (
        "values that are neither",
        {"iteration": 3, "fingerprint": "garbage", "dtype": "fp32"},
        None,
        FAIL,
        "neither the exact conversion nor",
    ),
    (
        "exact values, but training on diverges",
        {"iteration": 3, "fingerprint": "exact3fp32", "dtype": "fp32"},
        ("diverged",),
        FAIL,
        "training continued after the exact load diverged at iteration 5",
    ),
    (
        "a refusal naming the missing main parameters",
        {
            "type": "fail",
            "dtype": "fp32",
            "refused": False,
            "error": "IntegrityError: x: dcp.load failed: Missing key optimizer.main_param.output_layer.weight",
        },
        None,
        REFUSED,
        "REFUSED-CLEARLY",
    ),
    (
        "a refusal by the protocol's class",
        {"type": "fail", "dtype": "fp32", "refused": True, "error": "TopologyChangeRefused: no"},
        None,
        REFUSED,
        "REFUSED-CLEARLY",
    ),
    (
        "a failure that says nothing of precision",
        {"type": "fail", "dtype": "fp32", "refused": False, "error": "CheckpointNotFound: nothing"},
        None,
        FAIL,
        "does not name the precision change",
    ),
]


@pytest.mark.parametrize("name, load, continued, status, words", TABLE, ids=[row[0] for row in TABLE])
def test_each_precision_load_gets_its_verdict(name, load, continued, status, words):
    verdicts = _judge(_history(dict(load), continued=(5, continued[0]) if continued else None))
    v = verdicts["precision"]
    assert v.status == status, (name, v)
    assert words in v.detail, (name, v.detail)
    # the load is the precision checker's alone: no other checker fails on a value in another dtype
    others = {k: x.status for k, x in verdicts.items() if k != "precision" and x.status == FAIL}
    assert not others, (name, others)


def test_no_precision_change_is_not_a_pass():
    v = _judge(_history({"iteration": 3, "fingerprint": "fp3", "dtype": "bf16"}))["precision"]
    assert v.status == NA and "no resume changed precision" in v.detail
    old = _history({"iteration": 3, "fingerprint": "fp3"})  # a history from before dtypes were recorded
    assert _judge(old)["precision"].status == NA


def test_a_failure_after_damage_is_left_to_the_damage_checkers():
    events = _history(
        {"type": "fail", "dtype": "fp32", "refused": False, "error": "CheckpointNotFound: none"}, corrupt=True
    )
    assert _judge(events)["precision"].status == NA


def test_without_an_oracle_it_cannot_judge():
    v = _judge(_history({"iteration": 3, "fingerprint": "exact3fp32", "dtype": "fp32"}), oracle=None)["precision"]
    assert v.status == UNKNOWN


def test_a_silent_cast_may_be_accepted_by_choice():
    events = _history({"iteration": 3, "fingerprint": "cast3fp32", "dtype": "fp32"})
    ev = evidence_from(
        events,
        combo=Combination.parse("GLOBAL/torch_dist/sync"),
        save_topology=Topology.parse(T),
        never_stopped=lambda it: f"fp{it}",
        converted=_targets,
    )
    assert PrecisionOnResume(silent_cast=PASS).check(ev).status == PASS


@pytest.mark.parametrize(
    "promise, load, status",
    [
        ("refuse", {"iteration": 3, "fingerprint": "exact3fp32", "dtype": "fp32"}, FAIL),
        ("load", {"type": "fail", "dtype": "fp32", "refused": True, "error": "TopologyChangeRefused: no"}, FAIL),
        ("load", {"iteration": 3, "fingerprint": "exact3fp32", "dtype": "fp32"}, PASS),
        ("refuse", {"type": "fail", "dtype": "fp32", "refused": True, "error": "TopologyChangeRefused: no"}, REFUSED),
    ],
)
def test_a_stated_precision_promise_is_held(promise, load, status):
    from resilience.vocab.contract import TopologyContract

    ev = evidence_from(
        _history(dict(load)),
        combo=Combination.parse("GLOBAL/torch_dist/sync"),
        save_topology=Topology.parse(T),
        never_stopped=lambda it: f"fp{it}",
        converted=_targets,
        contract=TopologyContract.parse({"precision": promise}),
    )
    v = PrecisionOnResume().check(ev)
    assert v.status == status, v
    if status == FAIL:
        assert f"contract says precision changes {promise}" in v.detail


MOMENTS_LOST = "78778 of 79552 optimizer moments changed, relative error up to 3.88e-03 (exp_avg.output_layer.weight)"


def _optim_targets(iteration: int, saved: str, loaded: str) -> PrecisionTargets:
    """Only the moments' dtype changes: the exact answer is the cast; into bf16 it still loses precision."""
    rounded = loaded.endswith("optim_bf16")
    return PrecisionTargets(
        f"moments{iteration}{loaded}",
        f"moments{iteration}{loaded}",
        MOMENTS_LOST if rounded else "nothing (every value fits the new dtype)",
        lambda how, it: f"{how}-after{it}{loaded}",
        MOMENTS_LOST if rounded else "",
    )


MOMENTS_WARNING = "warning UserWarning: optimizer state exp_avg stored as float32, loaded as bfloat16"
OPTIM_TABLE = [
    (
        "fp32 moments rounded into bf16, said",
        "fp32",
        {"iteration": 3, "fingerprint": "moments3fp32+optim_bf16", "dtype": "fp32+optim_bf16"},
        [MOMENTS_WARNING],
        PASS,
        f"fp32->fp32+optim_bf16 (job 1): LOADED-CAST, precision lost: {MOMENTS_LOST}",
    ),
    (
        "fp32 moments rounded into bf16, unsaid: the best answer there is, and still a loss nobody heard of",
        "fp32",
        {"iteration": 3, "fingerprint": "moments3fp32+optim_bf16", "dtype": "fp32+optim_bf16"},
        [],
        FAIL,
        f"LOADED-CAST, precision lost: {MOMENTS_LOST}, no warning".replace("LOADED-CAST", "CAST-SILENTLY"),
    ),
    (
        "bf16 moments upcast: nothing lost, nothing to say",
        "fp32+optim_bf16",
        {"iteration": 3, "fingerprint": "moments3fp32", "dtype": "fp32"},
        [],
        PASS,
        "fp32+optim_bf16->fp32 (job 1): LOADED-EXACT",
    ),
    (
        "moments that are neither (a loader that reset them): a warning does not excuse them",
        "fp32",
        {"iteration": 3, "fingerprint": "zeros", "dtype": "fp32+optim_bf16"},
        [MOMENTS_WARNING],
        FAIL,
        f"WRONG, the loaded values are neither the exact conversion nor the cast, warned: {MOMENTS_WARNING}",
    ),
]


@pytest.mark.parametrize("name, saved, load, heard, status, words", OPTIM_TABLE, ids=[row[0] for row in OPTIM_TABLE])
def test_each_optimizer_precision_load_gets_its_verdict(name, saved, load, heard, status, words):
    load = dict(load, **({"captured": heard} if heard else {}))
    verdicts = _judge(_history(load, saved=saved, continued=(5, f"exact-after5{load['dtype']}")), _optim_targets)
    v = verdicts["precision"]
    assert v.status == status, (name, v)
    assert words in v.detail, (name, v.detail)
    others = {k: x.status for k, x in verdicts.items() if k != "precision" and x.status == FAIL}
    assert not others, (name, others)
