"""Faults as data: records round-trip through YAML/JSON, print in one line, and bad specs name the field."""

import dataclasses
import json

import pytest
import yaml

from resilience.errors import ConfigError
from resilience.faults import (
    KINDS,
    BitFlip,
    FaultReport,
    IOFailure,
    RankCrash,
    RankKill,
    Target,
    Trigger,
    WriterKill,
    fault_from_dict,
    faults_from,
    faults_from_text,
    firing,
    read_firings,
    unprobed,
)
from resilience.vocab.phases import PHASES

EXAMPLES = [
    {
        "kind": "io_error",
        "errno": "ENOSPC",
        "target": {"rank": 1, "op": "write", "path": "*.pt"},
        "trigger": {"nth": 2},
    },
    {"kind": "short_write", "keep": 10, "target": {"rank": 0}},
    {"kind": "torn_write", "keep": 3, "fill": "garbage", "target": {"path": "*.distcp"}, "seed": 7},
    {"kind": "slow_write", "delay": 0.5, "times": 3, "target": {"rank": [0, 1], "thread": "writer"}},
    {"kind": "rank_crash", "target": {"rank": 1, "path": "*.pt"}, "trigger": {"at_byte": 4096}},
    {"kind": "rank_crash", "target": {"op": "rename"}, "trigger": {"when": "after"}},
    {"kind": "rank_crash", "target": {"rank": 0, "thread": "main"}, "trigger": {"phase": "commit_rename", "nth": 2}},
    {"kind": "lost_unsynced_writes", "max_states": 8, "torn": False},
    {"kind": "rank_kill", "signal": "SIGKILL", "target": {"rank": 1, "path": "*.pt"}, "trigger": {"size": 100}},
    {"kind": "rank_kill", "trigger": {"after": 1.5}},
    {"kind": "rank_hang", "resume_after": 0.2, "target": {"rank": 1}, "trigger": {"after": 0.1}},
    {"kind": "writer_kill", "scope": "holder", "target": {"rank": 1, "path": "*.distcp"}, "trigger": {"size": 64}},
    {"kind": "truncate", "length": 0, "target": {"rank": 1, "iteration": 2}},
    {"kind": "bit_flip", "bits": [0, 7], "target": {"path": "*.distcp", "offset": 100}},
    {"kind": "delete_file", "target": {"path": "*mp_rank_01*"}},
    {"kind": "metadata_damage", "name": ".metadata", "how": "truncate"},
    {"kind": "escaping_path", "escape": "../../etc/passwd"},
    {"kind": "tracker_damage", "how": "future"},
    {"kind": "leftover_staging"},
    {"kind": "extra_file", "name": "x.bin", "length": 3},
    {"kind": "hostile_pickle", "target": {"iteration": 3}},
    {"kind": "http_error", "status": 500, "target": {"rank": 1, "op": "mpu_part", "path": "*.distcp"}},
    {"kind": "connection_reset", "keep": 1024, "target": {"op": "put"}, "trigger": {"nth": 2}},
    {"kind": "response_lost", "target": {"op": "mpu_complete"}},
    {"kind": "slow_write", "delay": 0.2, "target": {"op": "get"}},
    {"kind": "rank_crash", "target": {"rank": 0, "op": "mpu_part"}, "trigger": {"nth": 2, "when": "after"}},
]


def test_every_kind_has_an_example():
    assert {e["kind"] for e in EXAMPLES} == set(KINDS)


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda e: e["kind"])
def test_round_trip_through_json_and_yaml(spec):
    fault = fault_from_dict(spec, world=2)
    assert fault_from_dict(json.loads(json.dumps(fault.to_dict()))) == fault
    assert faults_from_text(yaml.safe_dump([fault.to_dict()]))[0] == fault
    assert fault_from_dict(fault.to_dict()).to_dict() == fault.to_dict()
    text = str(fault)
    assert "\n" not in text and text.startswith(fault.kind + " ") and text.endswith(f"seed={fault.seed}")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fault.seed = 3


def test_one_line_says_everything():
    f = fault_from_dict(EXAMPLES[0])
    assert str(f) == "io_error errno=ENOSPC rank=1 path=*.pt op=write nth=2 seed=0"
    assert isinstance(f, IOFailure) and f.code == 28 and f.target == Target(rank=1, path="*.pt", op="write")


def test_flat_keys_are_read_as_target_and_trigger():
    f = fault_from_dict({"kind": "rank_crash", "rank": 1, "path": "*.pt", "at_byte": 10})
    assert f == RankCrash(target=Target(rank=1, path="*.pt"), trigger=Trigger(at_byte=10))


def test_faults_from_a_scenario_document():
    doc = "faults:\n  - kind: bit_flip\n    target: {offset: 3}\n    bits: [1]\n  - {kind: rank_kill, after: 1}\n"
    a, b = faults_from_text(doc)
    assert a == BitFlip(target=Target(offset=3), bits=(1,)) and isinstance(b, RankKill) and b.trigger.after == 1


@pytest.mark.parametrize(
    "spec, field, words",
    [
        ({"kind": "meltdown"}, "faults[0].kind", "unknown fault kind"),
        ({"kind": "rank_crash", "rank": 2, "at_byte": 1}, "faults[0].target.rank", "out of range for world size 2"),
        ({"kind": "rank_crash", "rank": [0, 5], "at_byte": 1}, "faults[0].target.rank", "out of range"),
        ({"kind": "rank_crash", "rank": -1, "at_byte": 1}, "faults[0].target.rank", "negative"),
        ({"kind": "bit_flip", "target": {"offset": -4}}, "faults[0].target.offset", "negative"),
        ({"kind": "rank_crash", "at_byte": -1}, "faults[0].trigger.at_byte", "negative"),
        ({"kind": "rank_crash", "phase": "flush"}, "faults[0].trigger.phase", "unknown value 'flush'"),
        ({"kind": "io_error", "errno": "EWHATEVER"}, "faults[0].errno", "unknown errno"),
        ({"kind": "io_error", "op": "chmod"}, "faults[0].target.op", "unknown value 'chmod'"),
        ({"kind": "io_error", "phase": "write"}, "faults[0].trigger.phase", "io_error does not use phase"),
        ({"kind": "io_error", "nth": 0}, "faults[0].trigger.nth", "less than 1"),
        ({"kind": "io_error", "colour": "red"}, "faults[0].colour", "has no field 'colour'"),
        ({"kind": "io_error", "target": {"rnak": 1}}, "faults[0].target.rnak", "unknown field"),
        ({"kind": "rank_crash"}, "faults[0].trigger", "says nowhere to crash"),
        ({"kind": "rank_crash", "phase": "write", "op": "fsync"}, "faults[0].target.op", "phase trigger"),
        ({"kind": "short_write", "op": "rename"}, "faults[0].target.op", "acts on writes"),
        ({"kind": "slow_write", "delay": -1}, "faults[0].delay", "negative"),
        ({"kind": "rank_kill"}, "faults[0].trigger", "says nothing about when"),
        ({"kind": "rank_kill", "size": 10}, "faults[0].target.path", "needs the file to watch"),
        ({"kind": "rank_kill", "after": 1, "signal": "SIGFOO"}, "faults[0].signal", "unknown value"),
        ({"kind": "writer_kill", "scope": "everything"}, "faults[0].scope", "unknown value 'everything'"),
        ({"kind": "writer_kill", "size": 10}, "faults[0].target.path", "needs the file to watch"),
        ({"kind": "writer_kill", "rank": 2}, "faults[0].target.rank", "out of range for world size 2"),
        ({"kind": "writer_kill", "op": "write"}, "faults[0].target.op", "writer_kill does not use op"),
        ({"kind": "writer_kill", "after": -1}, "faults[0].trigger.after", "negative"),
        ({"kind": "writer_kill", "signal": "SIGTERM"}, "faults[0].signal", "has no field 'signal'"),
        ({"kind": "bit_flip", "bits": [8]}, "faults[0].bits", "not in a byte"),
        ({"kind": "truncate", "length": -3}, "faults[0].length", "negative"),
        ({"kind": "metadata_damage", "how": "shred"}, "faults[0].how", "unknown value"),
        ({"kind": "tracker_damage", "how": "late"}, "faults[0].how", "unknown value"),
        ({"kind": "escaping_path", "escape": "inside/file"}, "faults[0].escape", "does not leave"),
        ({"kind": "truncate", "target": {"rank": [0, 1]}}, "faults[0].target.rank", "picks one rank"),
        ({"kind": "lost_unsynced_writes", "max_states": 0}, "faults[0].max_states", "less than 1"),
        ("rank_crash", "faults[0]", "must be a mapping"),
        ({"kind": "http_error", "status": 404}, "faults[0].status", "unknown value 404"),
        ({"kind": "http_error", "op": "write"}, "faults[0].target.op", "unknown value 'write'"),
        ({"kind": "http_error", "thread": "writer"}, "faults[0].target.thread", "http_error does not use thread"),
        ({"kind": "connection_reset", "keep": -1}, "faults[0].keep", "negative"),
        ({"kind": "response_lost", "at_byte": 3}, "faults[0].trigger.at_byte", "does not use at_byte"),
        ({"kind": "io_error", "op": "put"}, "faults[0].target.op", "unknown value 'put'"),
        ({"kind": "rank_crash", "op": "mpu_part", "at_byte": 5}, "faults[0].target.op", "at_byte counts"),
    ],
)
def test_bad_spec_names_the_field(spec, field, words):
    with pytest.raises(ConfigError) as e:
        faults_from([spec], world=2)
    assert e.value.field == field, str(e.value)
    assert words in str(e.value)
    assert isinstance(e.value, ValueError)


def test_not_a_list_is_an_error():
    with pytest.raises(ConfigError, match="must be a list"):
        faults_from({"kind": "truncate"})


def test_every_phase_is_a_valid_crash_point():
    for phase in PHASES:
        assert fault_from_dict({"kind": "rank_crash", "phase": phase}).trigger.phase == phase


def test_report_lines_and_unprobed(tmp_path):
    a, b = faults_from(EXAMPLES[:2])
    report = FaultReport(tmp_path / "fired.jsonl")
    report.append(firing(a, "raise ENOSPC", rank=1, path="/x"))
    with open(report.path, "ab") as f:
        f.write(b'{"torn line')  # a crash in the middle of a line loses only that line
    got = read_firings(report.path)
    assert len(got) == 1 and got[0]["rank"] == 1 and got[0]["text"] == str(a)
    assert unprobed([a, b], got) == [b]
    assert read_firings(tmp_path / "absent.jsonl") == []


def test_fault_text_is_read_with_bounded_yaml():
    with pytest.raises(ConfigError, match="line 1: tag !!python/name:os.system is not allowed"):
        faults_from_text("- !!python/name:os.system\n")
    with pytest.raises(ConfigError, match="recursive alias"):
        faults_from_text("- &a {kind: io_error, target: *a}\n")


def test_a_writer_kill_needs_no_trigger_and_reads_as_a_kill_step():
    from resilience.runner.fault_steps import fault_of

    f = fault_of("kill", {"kind": "writer_kill", "rank": 1, "file": "@data"}, world=2)
    assert isinstance(f, WriterKill) and f.layer == "nemesis" and f.scope == "tree"
    assert f.target == Target(rank=1, path="@data") and f.trigger == Trigger()


def test_the_records_module_never_imports_the_kinds_built_on_it():
    """kinds.py derives from base.py; base.py importing kinds back (even inside a function) was a circle.
    Every kind is registered all the same: the package imports kinds.py."""
    import ast
    import subprocess
    import sys

    import resilience.faults.base as base

    tree = ast.parse(open(base.__file__).read())
    imported = {
        (n.module or "") + ":" + ",".join(a.name for a in n.names)
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
    }
    assert not [i for i in imported if "kinds" in i], imported
    # a fresh process that imports only the records module still reads every kind
    code = "from resilience.faults.base import fault_from_dict; print(fault_from_dict({'kind': 'torn_write'}).kind)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "torn_write", out.stderr
