"""Layouts learned from one clean save of real ranks, and the matrix's damage columns aimed through them
on code the framework did not write (stock DCP, a plain in-house library)."""

import json
import os
import sys

import pytest

from resilience.runner.learn import learn_layout
from resilience.runner.matrix import MODEL, fault_scenario
from resilience.runner.run import run_case
from resilience.state import Topology
from resilience.vocab.combos import Combination

INHOUSE = "tests.backends.inhouse:factory"
TOPO = Topology.parse("tp2pp1dp1")


def _roles(layout):
    return {f.template: (f.role, f.rank) for f in layout.files}


@pytest.mark.parametrize(
    "backend, combo",
    [("reference", "GLOBAL/torch_dist/sync"), ("dcp", "TORCH_DCP/torch_dcp/sync"), (INHOUSE, "LOCAL/torch/sync")],
    ids=["reference", "dcp", "inhouse"],
)
def test_one_clean_save_teaches_the_layout(tmp_path, backend, combo):
    layout = learn_layout(MODEL, TOPO, Combination.parse(combo), backend, str(tmp_path))
    roles = _roles(layout)
    assert os.path.isfile(tmp_path / "layout.json")
    if backend == "reference":
        assert layout.seam and roles["iter_{iteration:07d}/__1_0.distcp"] == ("data", 1)
        assert roles["iter_{iteration:07d}/manifest.json"][0] == "metadata"
        assert roles["latest_checkpointed_iteration.txt"][0] == "pointer"
        # written in a staging folder, then renamed into place: faults aim at where the bytes are written
        assert layout.write_glob("data", 3, 1) == "*/.staging-iter_0000003-*/__1_0.distcp"
        assert "write" in layout.announced
    elif backend == "dcp":
        assert layout.seam and roles == {
            "step-{iteration}/__0_0.distcp": ("data", 0),
            "step-{iteration}/__1_0.distcp": ("data", 1),
            "step-{iteration}/.metadata": ("metadata", 0),
        }
        assert layout.write_glob("data", 3, 1) == "*/step-3/__1_0.distcp"
        # DCP announces no phase: they are read from its operations
        assert not layout.announced and layout.phases["commit_rename"]["op"] == "rename"
        assert layout.phases["write"]["path"].endswith(".distcp")
    else:
        assert not layout.seam and layout.source == "scan"
        assert roles == {
            "iter_{iteration}/rank_0.pt": ("data", None),
            "iter_{iteration}/rank_1.pt": ("data", None),
            "iter_{iteration}/index.json": ("metadata", None),
            "latest.txt": ("pointer", None),
        }


@pytest.mark.parametrize(
    "backend, combo, column, failing",
    [
        # neither library checks what it loads: a flip comes back as wrong values
        (INHOUSE, "LOCAL/torch/sync", "bitflip", {"integrity"}),
        # nor falls back to an older save when the newest does not load
        (INHOUSE, "LOCAL/torch/sync", "truncate", {"durability"}),
        (INHOUSE, "LOCAL/torch/sync", "metadata", {"durability"}),
        # the wrong values are a state no save wrote, and the resume from them differs
        ("dcp", "TORCH_DCP/torch_dcp/sync", "bitflip", {"atomic_commit", "integrity", "resume_equivalence"}),
        ("dcp", "TORCH_DCP/torch_dcp/sync", "metadata", {"durability"}),
    ],
)
def test_damage_columns_give_a_real_verdict_on_foreign_code(tmp_path, backend, combo, column, failing):
    """Bit flips land in tensor payload, metadata damage in the backend's own metadata file: the damage
    is applied and judged, FAIL in the checkers it is about, never a framework error, an abort or a PASS
    on nothing."""
    result = run_case(fault_scenario(column, 0), Combination.parse(combo), str(tmp_path / "case"), backend=backend)
    assert result.verdict == "FAIL", result.detail
    assert {v.checker for v in result.verdicts if v.status == "FAIL"} == failing, result.detail
    events = [e for e in _history(tmp_path / "case") if e.get("f") == "corrupt"]
    assert [e["type"] for e in events] == ["ok"]
    damage = events[0]["value"]
    if column == "metadata":
        assert os.path.basename(damage["rel"]) in ("index.json", ".metadata")
    else:
        assert damage["iteration"] == 3 and damage["rel"].endswith((".pt", ".distcp"))
    if column == "bitflip":
        # no checksum in either: a flip in tensor payload comes back as wrong values
        assert "tensor payload" in damage["detail"] and result.verdict == "FAIL"


def _history(case):
    import json

    with open(os.path.join(case, "history.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_in_process_faults_on_code_outside_the_seam_are_unprobed_with_one_reason(tmp_path):
    """Asked to go through the seam, the faults cannot reach a library that writes with plain open()."""
    from resilience.runner.aiming import OUTSIDE_SEAM

    result = run_case(
        fault_scenario("io_error", 0),
        Combination.parse("LOCAL/torch/sync"),
        str(tmp_path / "case"),
        backend=INHOUSE,
        io="seam",
    )
    assert result.verdict == "UNPROBED" and OUTSIDE_SEAM in result.detail
    assert {f["detail"] for f in result.faults if f["status"] != "fired"} == {OUTSIDE_SEAM}


def test_by_default_the_file_system_reaches_code_outside_the_seam(tmp_path, fuse):
    """auto: the library declares nothing, so its faults go through the fault-injecting file system, which
    sees its torch.save writes: the fault fires there and the case is judged."""
    result = run_case(
        fault_scenario("io_error", 0), Combination.parse("LOCAL/torch/sync"), str(tmp_path / "case"), backend=INHOUSE
    )
    # rank 1's torch.save fails, and the library never tells rank 0, which waits in its barrier for ever
    assert result.verdict == "FAIL", result.detail
    assert {v.checker for v in result.verdicts if v.status == "FAIL"} == {"symmetry", "hang"}, result.detail
    assert [f["status"] for f in result.faults] == ["fired"]
    fired = [json.loads(line) for line in open(tmp_path / "case" / "faults.jsonl")]
    assert [(f["via"], f["rank"], os.path.basename(f["path"])) for f in fired] == [("fuse", 1, "rank_1.pt")]


NOTES = "tests.backends.inhouse:with_notes"


def test_a_load_teaches_which_files_it_reads_and_damage_only_goes_where_a_load_looks(tmp_path):
    import random

    from resilience.faults.damage_records import NotApplicable
    from resilience.faults.kinds import MetadataDamage
    from resilience.faults.layout_damage import metadata_damage
    from resilience.runner.matrix import cases, metadata_files_read

    combo = Combination.parse("LOCAL/torch/sync")
    layout = learn_layout(MODEL, TOPO, combo, NOTES, str(tmp_path / "learned"))
    read = {os.path.basename(f.template): f.read for f in layout.files}
    assert read == {"index.json": True, "notes.json": False, "rank_0.pt": True, "rank_1.pt": True, "latest.txt": True}
    assert "never read by a load: iter_{iteration}/notes.json" in layout.describe()
    # the matrix's metadata column: one case per metadata file a load reads, none for notes.json
    work = cases([combo], ["metadata"], {}, 0, lambda c: metadata_files_read(c, NOTES, str(tmp_path / "m")))
    assert [c.column for c in work] == ["metadata:index.json"]
    assert work[0].scenario.steps[-2].args["name"] == "index.json"
    # damage asked for in the file no load reads: not applicable, with why
    with pytest.raises(NotApplicable, match="no load of this backend reads"):
        metadata_damage(str(tmp_path / "learned" / "ckpt"), MetadataDamage(name="notes.json"), layout, random.Random(0))


@pytest.mark.multiprocess
def test_the_backend_is_imported_once_before_the_ranks_fork(tmp_path, monkeypatch):
    """A backend the command has not made yet (the matrix learns each combination's metadata files before
    its first case) is imported by the runner, not again in every rank of the clean save."""
    log = tmp_path / "imported_by"
    (tmp_path / "late_adapter.py").write_text(
        "import os\n"
        "from tests.backends.inhouse import factory\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "late_adapter", raising=False)
    learn_layout(MODEL, TOPO, Combination.parse("LOCAL/torch/sync"), "late_adapter:factory", str(tmp_path / "l"))
    assert log.read_text().split() == [str(os.getpid())]


TEMP_NAMES = "tests.runner.temp_name_backend:factory"


@pytest.mark.parametrize("column", ["kill", "io_error"])
def test_a_fault_at_a_temp_name_with_a_pid_and_a_random_part_fires_in_a_later_run(tmp_path, column):
    """The probe save's temp names carry its pids and random parts; the layout keeps them as '*', so the
    fault aimed at the data file's temp name fires in the case's own run (never UNPROBED)."""
    layout = learn_layout(MODEL, TOPO, Combination.parse("LOCAL/torch/sync"), TEMP_NAMES, str(tmp_path / "probe"))
    glob = layout.write_glob("data", 3, 1)
    assert glob == "*/iter_3/rank_1.pt.tmp-*-*", layout.describe()
    assert "iter_{iteration}/rank_1.pt.tmp-*-* -> iter_{iteration}/rank_1.pt" in layout.describe()
    case = tmp_path / "case"
    result = run_case(fault_scenario(column, 0), Combination.parse("LOCAL/torch/sync"), str(case), backend=TEMP_NAMES)
    assert result.verdict not in ("UNPROBED", "UNKNOWN", "ERROR"), result.detail
    assert result.faults and all(f["status"] == "fired" for f in result.faults), result.faults
