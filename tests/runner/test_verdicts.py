"""Verdicts on implementations with one error each, through the real runner and ranks: an acknowledged
save is never forgotten, and an implementation error is never N/A."""

import json

import pytest

from resilience.cli import main
from resilience.runner.run import run_case
from resilience.runner.scenario import load_text
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess

FAULTY = "tests.runner.faulty_backends"

RESAVE = """
name: resave-fails
topology: tp2pp1dp1
steps:
  - train: 2
  - save
  - fault: {kind: io_error, errno: EIO, rank: 1, op: write}
  - save
  - resume: {continue: 1}
"""


def _statuses(result):
    return {v.checker: v.status for v in result.verdicts}


def test_a_failed_resave_never_overwrites_the_acknowledgement_before_it(tmp_path):
    # the second save of iteration 2 fails on rank 1 after the backend deleted the first, acknowledged copy
    s = load_text(RESAVE, "s.yaml")
    result = run_case(
        s, Combination.parse("GLOBAL/torch_dist/sync"), str(tmp_path / "case"), backend=f"{FAULTY}:destroys_on_resave"
    )
    assert result.verdict == "FAIL" and _statuses(result)["durability"] == "FAIL", result.to_row()
    saves = [json.loads(line) for line in open(tmp_path / "case" / "history.jsonl")]
    ids = {e["value"]["save_id"] for e in saves if e["f"] == "save"}
    assert ids == {"0.1", "0.2"}  # two saves of one iteration, two records
    # the reference keeps the first copy: the same scenario passes
    result = run_case(s, Combination.parse("GLOBAL/torch_dist/sync"), str(tmp_path / "reference"))
    assert result.verdict == "PASS", result.to_row()
    assert "1 of 2 saves acknowledged" in next(v.detail for v in result.verdicts if v.checker == "saves")


def test_a_backend_whose_every_save_raises_enospc_on_one_rank_never_passes(tmp_path, capsys):
    code = main(
        [
            "matrix",
            "--backend",
            f"{FAULTY}:disk_full",
            "--combos",
            "GLOBAL/torch_dist/sync",
            "--faults",
            "save/load",
            "--transitions",
            "none",
            "--out",
            str(tmp_path),
            "--json",
            str(tmp_path / "rows.json"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    (row,) = json.loads((tmp_path / "rows.json").read_text())
    checks = {c["checker"]: c for c in row["checkers"]}
    # the full disk alone would be UNKNOWN (the environment refused); rank 0 left waiting for rank 1 in the
    # save's collective is the implementation's own FAIL
    assert checks["saves"]["status"] == "UNKNOWN", row
    assert "save raised OSError ENOSPC: No space left on device on rank 1" in checks["saves"]["detail"], row
    assert row["verdict"] == "FAIL" and checks["symmetry"]["status"] == "FAIL", row
    assert "rank 1 raised OSError" in checks["symmetry"]["detail"] and "rank 0 stayed blocked" in row["detail"]


def _pickle_column(tmp_path, backend: str, combos: list[str]) -> tuple[int, list[dict]]:
    rows = tmp_path / f"{backend.replace(':', '-')}.json"
    code = main(
        ["matrix", "--backend", backend, "--combos", *combos, "--faults", "pickle", "--transitions", "none"]
        + ["--out", str(tmp_path / "runs"), "--json", str(rows)]
    )
    return code, json.loads(rows.read_text())


def test_the_pickle_column_reaches_torch_files(tmp_path):
    """With no .metadata the hostile pickle lands in a torch.save file: the reference's weights_only load
    refuses it and falls back (PASS); a loader with weights_only=False runs it (integrity FAIL)."""
    combos = ["LEGACY/torch/sync", "LOCAL/torch/sync"]
    code, rows = _pickle_column(tmp_path, "reference", combos)
    assert code == 0 and [r["verdict"] for r in rows] == ["PASS", "PASS"], rows
    for row in rows:
        checks = {c["checker"]: c for c in row["checkers"]}
        assert checks["integrity"]["status"] == "PASS" and checks["durability"]["status"] == "PASS", row
    code, rows = _pickle_column(tmp_path, "broken:unsafe_unpickle", combos[:1])
    (row,) = rows
    checks = {c["checker"]: c for c in row["checkers"]}
    assert code == 1 and row["verdict"] == "FAIL" and checks["integrity"]["status"] == "FAIL", row
    assert "loading ran code planted in the checkpoint (iter_0000003/mp_rank_0" in checks["integrity"]["detail"]
    assert "model_optim_rng.pt)" in checks["integrity"]["detail"]


def test_a_save_that_raises_a_bug_is_a_failure_with_the_error(tmp_path):
    s = load_text(RESAVE.replace("  - fault: {kind: io_error, errno: EIO, rank: 1, op: write}\n", ""), "s.yaml")
    result = run_case(s, Combination.parse("LEGACY/torch/sync"), str(tmp_path / "case"), backend=f"{FAULTY}:raises")
    assert result.verdict == "FAIL" and _statuses(result)["saves"] == "FAIL", result.to_row()
    assert "save raised ValueError: cannot serialise the optimizer state on rank" in result.detail


@pytest.mark.tmpfs_size("192k")
def test_a_real_full_disk_is_unknown_and_named_enospc(small_tmpfs):
    """The reference gathers each rank's OSError into a RankFailure: its errno is still found and named."""
    s = load_text("name: full-disk\nsteps:\n  - train: 1\n  - save\n  - train: 1\n  - save\n", "s.yaml")
    result = run_case(s, Combination.parse("GLOBAL/torch_dist/sync"), str(small_tmpfs / "case"))
    assert result.verdict == "UNKNOWN", result.to_row()
    saves = next(v for v in result.verdicts if v.checker == "saves")
    assert saves.status == "UNKNOWN" and "ENOSPC" in saves.detail and "No space left" in saves.detail, saves
