"""A scenario's fault steps become Fault records once, as the file is loaded: shorthands spelled out, the
records the planner, the ranks and the file system take. Pure logic, no ranks."""

import glob
import json
import os

import pytest

from resilience.errors import ConfigError
from resilience.faults import (
    BitFlip,
    Fault,
    IOFailure,
    LostUnsyncedWrites,
    RankCrash,
    RankHang,
    RankKill,
    Target,
    Trigger,
    faults_from,
)
from resilience.runner.fault_steps import FAULT_STEPS, fault_of
from resilience.runner.matrix import FAULTS, fault_scenario
from resilience.runner.plan import ArmedFault
from resilience.runner.scenario import ScenarioError, load_file, load_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHORTHANDS = {
    "crash at a phase": ("crash", {"rank": 1, "phase": "write"}, RankCrash(Target(rank=1), Trigger(phase="write"))),
    "crash at a byte of a file": (
        "crash",
        {"rank": "all", "after_bytes": 64, "file": "*.pt"},
        RankCrash(Target(path="*.pt"), Trigger(at_byte=64)),
    ),
    "kill with a nested when": (
        "kill",
        {"rank": 0, "when": {"file": "*.pt", "size": 9}},
        RankKill(Target(rank=0, path="*.pt"), Trigger(size=9)),
    ),
    "a hang is a kill of another kind": (
        "kill",
        {"kind": "rank_hang", "rank": 1, "after": 0.5},
        RankHang(Target(rank=1), Trigger(after=0.5)),
    ),
    "corrupt by its short name": ("corrupt", {"kind": "bitflip", "seed": 3}, BitFlip(seed=3)),
    "lose_unsynced": (
        "lose_unsynced",
        {"rank": 1, "after_bytes": 200, "max_states": 8},
        LostUnsyncedWrites(Target(rank=1), Trigger(at_byte=200), max_states=8),
    ),
    "any record": (
        "fault",
        {"kind": "io_error", "errno": "EIO", "target": {"op": "write"}},
        IOFailure(Target(op="write"), errno="EIO"),
    ),
}


@pytest.mark.parametrize("name", list(SHORTHANDS))
def test_a_step_is_the_record_it_stands_for(name):
    step, args, want = SHORTHANDS[name]
    assert fault_of(step, args, world=2) == want


def test_a_loaded_step_holds_its_record_and_writes_back_what_the_file_said():
    s = load_text(
        "topology: tp2pp1dp1\nsteps:\n  - train: 1\n  - crash: {rank: 1, after_bytes: 64, file: '*.pt'}\n  - save\n",
        "x.yaml",
    )
    [crash] = [st for st in s.steps if st.fault is not None]
    assert crash.fault == RankCrash(Target(rank=1, path="*.pt"), Trigger(at_byte=64))
    assert crash.to_dict() == {"crash": {"rank": 1, "after_bytes": 64, "file": "*.pt"}}  # the YAML, unchanged
    assert all(st.fault is None for st in s.steps if st.kind not in FAULT_STEPS)


def test_a_bad_record_names_the_file_line_and_the_option_as_written():
    with pytest.raises(ScenarioError) as e:
        load_text("topology: tp2pp1dp1\nsteps:\n  - train: 1\n  - crash: {rank: 5, phase: write}\n", "x.yaml")
    assert str(e.value).startswith("x.yaml:4: steps.1.crash.rank: rank 5 is out of range for world size 2")
    with pytest.raises(ConfigError, match="unknown corruption"):
        fault_of("corrupt", {"kind": "shred"})


@pytest.mark.parametrize(
    "path",
    sorted(
        glob.glob(os.path.join(ROOT, "scenarios", "*.yaml"))
        + glob.glob(os.path.join(ROOT, "examples", "inhouse", "scenarios", "*.yaml"))
    ),
    ids=os.path.basename,
)
def test_every_shipped_fault_step_has_its_record(path):
    s = load_file(path)
    for st in s.steps:
        assert (st.fault is not None) == (st.kind in FAULT_STEPS), (path, st)


@pytest.mark.parametrize("column", list(FAULTS))
def test_the_matrix_columns_are_records_too(column):
    s = fault_scenario(column, seed=7)
    faults = [st.fault for st in s.steps if st.kind in FAULT_STEPS]
    assert all(isinstance(f, Fault) for f in faults)
    assert all(f.seed == 7 for f in faults if f.layer == "at_rest")  # --seed moves the damage too


def test_an_armed_fault_crosses_to_the_ranks_as_json_and_reads_back_equal():
    armed = ArmedFault(fault_of("crash", {"rank": 1, "after_bytes": 64, "file": "@data"}, world=2), 3)
    sent = json.loads(json.dumps(armed.to_dict()))
    assert sent["arm_at"] == 3 and faults_from([sent["fault"]], world=2) == [armed.fault]
