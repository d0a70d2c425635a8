"""--io: which way a case's in-rank faults reach the implementation. The seam reaches only code that
writes through resilience.storage; the fault-injecting file system reaches every writer, `cp` included."""

import json
import os

import pytest

from resilience.errors import ConfigError
from resilience.faults import Fault
from resilience.fusefs.injector import carries_out
from resilience.runner import io_route
from resilience.runner.run import case_way, run_case
from resilience.runner.scenario import load_text
from resilience.vocab.combos import Combination

COMBO = Combination.parse("LOCAL/torch/sync")
SHELL_COPY = "tests.backends.shell_copy:factory"
# rank 1 dies once 1000 bytes of its data file of the second save have landed
CRASH_IN_COPY = """
name: crash-inside-cp
topology: tp2pp1dp1
combinations: [LOCAL/torch/sync]
steps: [{train: 1}, save, {train: 1}, {crash: {rank: 1, after_bytes: 1000, file: "@data"}}, save, resume]
"""


def test_auto_is_the_seam_for_the_reference_and_the_file_system_for_others():
    assert io_route.resolve(None, "reference") == io_route.resolve("auto", "broken:no_fsync") == "seam"
    assert io_route.resolve("auto", SHELL_COPY) == "fuse"
    assert io_route.resolve("seam", SHELL_COPY) == "seam" and io_route.resolve("fuse", "reference") == "fuse"
    with pytest.raises(ConfigError, match="use seam .* fuse .* or auto"):
        io_route.check("nfs")


def test_the_file_system_takes_the_records_its_injector_carries_out():
    """One rule with fusefs.injector: in-rank kinds not at a phase, in flat or nested form alike."""

    def fs_takes(record: dict) -> bool:
        return carries_out(Fault.from_dict(record))

    assert fs_takes({"kind": "rank_crash", "rank": 1, "at_byte": 256, "path": "@data"})
    assert fs_takes({"kind": "lost_unsynced_writes", "target": {"rank": 1}, "trigger": {"at_byte": 9}})
    assert not fs_takes({"kind": "rank_crash", "trigger": {"phase": "write"}})  # heard only in process
    assert not fs_takes({"kind": "rank_crash", "phase": "commit_rename"})
    assert not fs_takes({"kind": "rank_kill", "rank": 1, "after": 1}) and not fs_takes({"kind": "truncate"})


def test_a_case_mounts_only_for_faults_the_file_system_carries_out():
    crash = load_text(CRASH_IN_COPY)
    kill = load_text(CRASH_IN_COPY.replace("crash: {rank: 1, after_bytes: 1000", "kill: {rank: 1, size: 1000"))
    assert case_way(crash, "reference", "fuse") == "fuse"
    assert case_way(kill, "reference", "fuse") == "seam"  # the nemesis needs no mount
    assert case_way(crash, "reference", "auto") == "seam"


def test_a_crash_at_a_phase_mounts_for_a_backend_outside_the_seam():
    """Such a backend announces no phase: the aiming makes it the operation that starts it, which only the file
    system meets; the reference hears the phase itself, in process."""
    phase = load_text(CRASH_IN_COPY.replace('{rank: 1, after_bytes: 1000, file: "@data"}', "{phase: write}"))
    assert case_way(phase, SHELL_COPY, "auto") == "fuse"
    assert case_way(phase, "reference", "auto") == "seam"


def test_a_scenario_says_its_way_and_a_bad_one_is_named():
    assert load_text(CRASH_IN_COPY + "io: fuse\n").io == "fuse"
    assert "io: fuse" in load_text(CRASH_IN_COPY + "io: fuse\n").to_yaml()
    with pytest.raises(ConfigError, match="io"):
        load_text(CRASH_IN_COPY + "io: tape\n")


@pytest.mark.multiprocess
def test_a_writer_that_is_not_python_is_killed_at_the_byte(tmp_path, fuse):
    result = run_case(load_text(CRASH_IN_COPY), COMBO, str(tmp_path / "case"), backend=SHELL_COPY)
    assert [f["status"] for f in result.faults] == ["fired"], result.detail
    # killed inside cp of the second save, before the pointer moved: the first save loads whole
    assert result.verdict == "PASS", result.detail
    fired = [json.loads(line) for line in open(tmp_path / "case" / "faults.jsonl")]
    assert [(f["via"], f["action"], f["rank"]) for f in fired] == [("fuse", "sigkill", 1)]
    # cp wrote through the mount; the file holds exactly the bytes before the crash point
    assert os.path.getsize(tmp_path / "case" / "ckpt" / "iter_2" / "rank_1.pt") == 1000
    scenario = open(tmp_path / "case" / "scenario.yaml").read()
    assert "io:" not in scenario  # auto, the default: not written, so the replay takes whatever auto means then


@pytest.mark.multiprocess
def test_through_the_seam_the_same_fault_never_reaches_cp(tmp_path):
    result = run_case(load_text(CRASH_IN_COPY), COMBO, str(tmp_path / "case"), backend=SHELL_COPY, io="seam")
    assert result.verdict == "UNPROBED", result.detail


def test_where_fuse_cannot_mount_a_fuse_case_is_unprobed_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(io_route, "unavailable", lambda: "/dev/fuse does not exist (stubbed)")
    result = run_case(load_text(CRASH_IN_COPY), COMBO, str(tmp_path / "case"), backend=SHELL_COPY)
    assert result.verdict == "UNPROBED" and "/dev/fuse does not exist (stubbed)" in result.detail
    assert "--io" not in result.replay and os.path.exists(tmp_path / "case" / "scenario.yaml")
