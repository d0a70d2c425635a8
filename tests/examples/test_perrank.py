"""The second example (examples/perrank: rankckpt, a per-rank library written with care: temporary names with
a pid and a random part, fsync, rename, a manifest of sizes and sha256 of its own, verified loads with
fallback) under the framework, run as its users run it: the `resilience` command in a subprocess from the
example's folder. On a correct library the framework's own aiming must leave nothing UNPROBED, UNKNOWN or
erroring; the planted retention bug (rankckpt 0.1's `prune=early`) must be the retention checker's FAIL.
A fast part by default; the whole matrix and the shipped scenario library under -m slow."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "perrank")
BACKEND = "rankckpt_resilience:factory"
PASSED = {"PASS", "REFUSED-AS-EXPECTED"}
# the cases of the shipped library a correct rankckpt has nothing to probe with, each for its reason
NOT_APPLICABLE = {
    "crash-at-staging": "never reaches a 'staging' phase",  # it writes into the iteration's folder itself
    "corrupt-escaping-path": "no file list of the reference's manifest format",  # its manifest.json is its own
    "corrupt-extra-file": "probed nothing",  # an unknown file beside its files changes nothing it loads
}


def _resilience(args: list[str], tmp_path, timeout: float = 600) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`resilience ARGS` from the example's folder (its modules importable by name, as in every rank
    process), with this checkout's package; the rows of the run folder it wrote."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (EXAMPLE, ROOT, env.get("PYTHONPATH")) if p)
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    before = set(runs.iterdir())
    argv = ["resilience", *args, "--out", str(runs)]
    done = subprocess.run(argv, cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=timeout)
    folders = set(runs.iterdir()) - before  # this command's run folder, whose results.json has every row
    rows = [json.loads((f / "results.json").read_text()) for f in folders if (f / "results.json").is_file()]
    return done, rows[0] if rows else []


def _needs_the_file_system():
    from resilience.runner.io_route import unavailable

    if (why := unavailable()) is not None:  # its in-process faults reach plain open() through the mount only
        pytest.skip(f"the fault-injecting file system cannot mount here: {why}")


def _assert_probed(done, rows, not_applicable: dict[str, str]):
    out = done.stdout + done.stderr
    assert rows, out
    for r in rows:
        where = f"{r['scenario']} {r['column'] or ''}: {r['verdict']}: {r['detail'][:600]}"
        if r["verdict"] == "N/A":
            name = r["scenario"] if r["scenario"] in not_applicable else r["column"]
            assert name in not_applicable and not_applicable[name] in r["detail"], where
        else:
            assert r["verdict"] in PASSED, where
    assert done.returncode == 0, out


@pytest.mark.multiprocess
def test_the_matrix_probes_every_column_on_a_correct_per_rank_library(tmp_path):
    _needs_the_file_system()
    done, rows = _resilience(["matrix", "--backend", BACKEND, "--transitions", "tp", "to-bf16"], tmp_path)
    _assert_probed(done, rows, {"writer_kill": "saves synchronously"})
    by_column = {r["column"]: r for r in rows}
    assert {"kill", "io_error", "lost_unsynced", "truncate", "bitflip", "pickle"} <= set(by_column)
    # the foreign manifest.json is never forged as the reference's: the pickle lands in a data file alone
    pickle = by_column["pickle"]
    assert pickle["verdict"] == "PASS" and "rank_0000" in pickle["faults"][0]["detail"], pickle
    assert by_column["tp"]["verdict"] == "REFUSED-AS-EXPECTED"


@pytest.mark.multiprocess
def test_crashes_at_named_phases_strike_the_operations_that_start_them(tmp_path):
    _needs_the_file_system()
    names = ["write", "manifest", "commit_rename", "tracker_update", "staging"]
    done, rows = _resilience(
        ["run", *(os.path.join(ROOT, "scenarios", f"crash-at-{n}.yaml") for n in names), "--backend", BACKEND],
        tmp_path,
    )
    _assert_probed(done, rows, {"crash-at-staging": NOT_APPLICABLE["crash-at-staging"]})
    aimed = {r["scenario"]: r["faults"][0]["fault"] for r in rows}
    assert "manifest.json.tmp-*-* op=create" in aimed["crash-at-manifest"], aimed
    assert "manifest.json.tmp-*-* op=rename" in aimed["crash-at-commit_rename"], aimed  # its commit
    assert "latest.tmp-*-* op=create" in aimed["crash-at-tracker_update"], aimed


@pytest.mark.multiprocess
def test_pruning_before_the_other_ranks_commit_is_the_retention_checkers_fail(tmp_path):
    _needs_the_file_system()
    done, rows = _resilience(
        [
            "matrix",
            "--backend",
            "rankckpt_resilience:prunes_early",
            "--faults",
            "kill",
            "io_error",
            "--transitions",
            "none",
        ],
        tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    for r in rows:
        retention = next(c for c in r["checkers"] if c["checker"] == "retention")
        assert r["verdict"] == "FAIL" and retention["status"] == "FAIL", r
        culprit = retention["evidence"][0]
        # the deleting operation: rank 0 removing iteration 2 while rank 1's file of iteration 3 is not in place
        assert (culprit["rank"], culprit["iteration"], culprit["op"]) == (0, 2, "unlink"), culprit
        assert "still the newest acknowledged checkpoint" in retention["detail"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_whole_matrix_and_scenario_library_probe_a_correct_per_rank_library(tmp_path):
    _needs_the_file_system()
    done, rows = _resilience(["matrix", "--backend", BACKEND], tmp_path)
    _assert_probed(done, rows, {"writer_kill": "saves synchronously"})
    assert len(rows) == 18
    done, rows = _resilience(["run", os.path.join(ROOT, "scenarios"), "--backend", BACKEND], tmp_path, timeout=1200)
    _assert_probed(done, rows, NOT_APPLICABLE)
    assert len(rows) == 46 and sum(r["verdict"] == "N/A" for r in rows) == len(NOT_APPLICABLE)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_fuzzer_shrinks_the_early_pruning_to_the_retention_checkers_fail(tmp_path):
    _needs_the_file_system()
    done, _ = _resilience(
        ["fuzz", "--backend", "rankckpt_resilience:prunes_early", "--examples", "50", "--seed", "3"], tmp_path
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    shrunk = [line for line in out.splitlines() if line.startswith("FAIL (")]
    assert shrunk and all("FailInRetentionDeleted" in line for line in shrunk), out
    assert all("retention:" in line and "unlink iter_" in line and "by rank 0" in line for line in shrunk), out
