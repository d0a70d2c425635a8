"""One fault kind, every carrier: a kind defined once (here, in the test) fires through the seam's injector
on real files and through the FUSE file system on a real mount, from that one definition; a kind that no
carrier of the chosen way carries is refused before the case runs, with the reason."""

import errno
import os
from dataclasses import dataclass
from typing import ClassVar

import pytest

from resilience import storage
from resilience.errors import ConfigError
from resilience.faults import KINDS, Fault, FaultyFileSystem, faults_from, inject
from resilience.fusefs import mounted
from resilience.fusefs.injector import FuseInjector
from resilience.runner import io_route
from resilience.runner.run import case_way
from resilience.runner.scenario import load_text
from resilience.storage import LocalFileSystem
from resilience.triggers import FAIL

from .procs import Rank

EROFS = errno.EROFS  # (inside the class body below, `errno` is the record's field)


@pytest.fixture
def toy_kinds():
    """Two kinds defined here and nowhere else, registered for the test only: `toy_read_only` (the nth
    matching operation finds the folder remounted read-only: EROFS; an effect every carrier performs) and
    `toy_reorder` (writes reach the disk out of order: an effect no carrier performs)."""

    @dataclass(frozen=True)
    class ReadOnly(Fault):
        """The nth matching operation fails with EROFS, as on a file system remounted read-only."""

        kind: ClassVar[str] = "toy_read_only"
        effect: ClassVar[str | None] = FAIL
        uses: ClassVar[frozenset[str]] = frozenset({"rank", "path", "op", "nth"})
        errno: ClassVar[str] = "EROFS"
        code: ClassVar[int] = EROFS

    @dataclass(frozen=True)
    class Reorder(Fault):
        kind: ClassVar[str] = "toy_reorder"
        effect: ClassVar[str | None] = "reorder"
        uses: ClassVar[frozenset[str]] = frozenset({"rank", "path"})

    yield ReadOnly, Reorder
    for cls in (ReadOnly, Reorder):
        del KINDS[cls.kind]


def _write_and_rename(folder) -> int | None:
    """Write a file and rename it twice through storage.current(); the errno that stopped it, or None."""
    fs = storage.current()
    try:
        with fs.open_write(os.path.join(folder, "a.tmp")) as f:
            f.write(b"data")
        fs.rename(os.path.join(folder, "a.tmp"), os.path.join(folder, "b.tmp"))
        fs.rename(os.path.join(folder, "b.tmp"), os.path.join(folder, "c.final"))
    except OSError as e:
        return e.errno
    return None


def _in_rank(conn, folder):
    with storage.use(LocalFileSystem()):
        return _write_and_rename(folder)


RECORD = {"kind": "toy_read_only", "op": "rename", "nth": 2, "rank": 0}


def test_a_kind_defined_once_fires_through_the_seam(tmp_path, toy_kinds):
    fs = FaultyFileSystem(LocalFileSystem(), faults_from([RECORD]), rank=0)
    with storage.use(fs):
        assert _write_and_rename(str(tmp_path)) == errno.EROFS
    assert sorted(os.listdir(tmp_path)) == ["b.tmp"]
    assert [(f["kind"], f["action"], f["rank"], os.path.basename(f["dst"])) for f in fs.firings()] == [
        ("toy_read_only", "raise EROFS", 0, "c.final")
    ]


@pytest.mark.multiprocess
def test_the_same_kind_fires_through_the_file_system(dirs, toy_kinds):
    backing, mnt, log = dirs
    with mounted(backing, mnt, log=log, faults=[RECORD]) as m:
        p = Rank(_in_rank, str(mnt))
        m.set_ranks({0: p.pid})
        code, msg = p.go().wait()
        fired = m.firings()
    assert code == 0 and msg == ("ok", errno.EROFS), msg
    assert sorted(os.listdir(backing)) == ["b.tmp"]
    assert [(f["kind"], f["action"], f["rank"], f["via"], os.path.basename(f["dst"])) for f in fired] == [
        ("toy_read_only", "raise EROFS", 0, "fuse", "c.final")
    ]


SCENARIO = """
name: toy
topology: tp1pp1dp1
combinations: [LOCAL/torch/sync]
steps: [{train: 1}, {fault: FAULT}, save, resume]
"""


def test_a_kind_no_carrier_of_the_way_carries_is_refused_before_the_case_runs(toy_kinds):
    scenario = load_text(SCENARIO.replace("FAULT", "{kind: toy_reorder, path: '*.pt'}"))
    for io in ("seam", "fuse"):
        with pytest.raises(ConfigError, match=f"no carrier of --io {io} carries out toy_reorder") as e:
            case_way(scenario, "reference", io)
        assert "toy_read_only" in str(e.value) and "(its effect: reorder)" in str(e.value)
    [reorder] = faults_from([{"kind": "toy_reorder"}])
    with pytest.raises(ConfigError, match="the storage seam does not carry out toy_reorder"):
        with inject([reorder], rank=0):
            pass
    assert FuseInjector([reorder]).faults == []  # the file system takes only what it carries
    carried = load_text(SCENARIO.replace("FAULT", "{kind: toy_read_only, op: rename}"))
    assert case_way(carried, "reference", "fuse") == "fuse" and case_way(carried, "reference", "seam") == "seam"


def test_a_phase_is_the_seams_alone_and_under_fuse_stays_in_the_ranks():
    phase, op = faults_from([{"kind": "rank_crash", "phase": "write"}, {"kind": "rank_crash", "op": "fsync"}])
    assert io_route.carrier_of("fuse", phase) is FaultyFileSystem.CARRIES
    assert io_route.carrier_of("fuse", op) is FuseInjector.CARRIES
    assert io_route.carrier_of("seam", op) is FaultyFileSystem.CARRIES
    io_route.refuse_uncarried("fuse", [phase, op])  # both carried: nothing to refuse


def test_resilience_run_refuses_a_scenario_whose_fault_no_carrier_carries_before_any_case(tmp_path, toy_kinds, capsys):
    from resilience.cli import main

    path = tmp_path / "reorder.yaml"
    path.write_text(SCENARIO.replace("FAULT", "{kind: toy_reorder, path: '*.pt'}"))
    out = tmp_path / "runs"
    code = main(["run", str(path), "--combos", "LOCAL/torch/sync", "--io", "seam", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "no carrier of --io seam carries out toy_reorder" in err, err
    assert "Traceback" not in err and not out.exists()  # refused before a run folder or a case
