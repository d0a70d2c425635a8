"""The run folder: made atomically with a unique name; a bad --out (a file, a path under a file, a
read-only or full file system) is one clear error before any case runs, with nothing left behind."""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from resilience.cli import main
from resilience.errors import ConfigError
from resilience.report import RunFolder, make_run_dir
from resilience.report.folder import make_folder
from resilience.report.result_row import ResultRow
from resilience.verdicts import PASS


def _make_many(base: str, n: int) -> list[str]:
    return [make_run_dir(base, "same") for _ in range(n)]


def test_concurrent_calls_get_distinct_folders(tmp_path):
    base = str(tmp_path / "runs")
    with ThreadPoolExecutor(16) as pool:
        paths = list(pool.map(lambda _: make_run_dir(base, "same"), range(160)))
    with mp.get_context("fork").Pool(4) as pool:  # and from several processes at once
        paths += [p for chunk in pool.starmap(_make_many, [(base, 20)] * 4) for p in chunk]
    assert len(set(paths)) == len(paths) == 240
    assert sorted(os.listdir(base)) == sorted(os.path.basename(p) for p in paths)


@pytest.mark.parametrize("where", ["afile", "afile/below", "afile/below/deeper"])
def test_out_naming_a_file_or_a_path_under_a_file_is_one_error(tmp_path, where):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="--out: cannot make a run folder under .*(a file|not a folder)"):
        make_run_dir(str(tmp_path / where), "matrix")
    assert sorted(os.listdir(tmp_path)) == ["afile"]


def test_a_missing_base_is_made(tmp_path):
    path = make_run_dir(str(tmp_path / "new" / "runs"), "x")
    assert os.path.isdir(path) and os.listdir(path) == []


def _fill(mnt) -> None:
    with open(mnt / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC


def test_a_full_file_system_is_one_error_and_leaves_nothing(small_tmpfs):
    _fill(small_tmpfs)
    with pytest.raises(ConfigError, match="no space left"):
        make_run_dir(str(small_tmpfs / "runs" / "deeper"), "matrix")  # the folders it made are removed
    with pytest.raises(ConfigError, match="no space left"):
        RunFolder.create(str(small_tmpfs), "matrix", {"title": "t"})
    with pytest.raises(ConfigError, match="no space left"):
        make_folder(str(small_tmpfs / "corpus"), "corpus", empty=True)
    assert sorted(os.listdir(small_tmpfs)) == ["filler"]


def test_a_read_only_file_system_is_one_error(small_tmpfs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    with pytest.raises(ConfigError, match="read-only"):
        make_run_dir(str(small_tmpfs / "runs"), "matrix")
    assert os.listdir(small_tmpfs) == []


# every command that writes a run folder refuses a bad one before any case: exit 2, one error line
COMMANDS = {
    "run": ["run", os.path.join(os.path.dirname(__file__), "..", "..", "scenarios")],
    "matrix": ["matrix", "--combos", "GLOBAL/torch_dist/sync", "--faults", "save/load", "--transitions", "none"],
    "fuzz": ["fuzz", "--examples", "1", "--mode", "scenarios", "--max-world", "1", "--time-budget", "60"],
    "broken": ["broken", "--names", "no_fsync"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS) + ["corpus write", "validate --local"])
def test_every_command_refuses_a_bad_out_before_any_case(tmp_path, capsys, command, monkeypatch):
    import resilience.runner.run as run_module

    def no_case(*a, **kw):
        raise AssertionError("a case ran")

    monkeypatch.setattr(run_module, "run_case", no_case)
    afile = tmp_path / "afile"
    afile.write_text("x")
    target = str(afile / "below")
    if command == "corpus write":
        argv = ["corpus", "write", target, "--combos", "GLOBAL/torch_dist/sync"]
    elif command == "validate --local":
        argv = ["validate", "--local", "--shared", target, "--run-timeout", "5"]
    else:
        argv = COMMANDS[command] + ["--out", target]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a folder" in err[0] and "Traceback" not in err[0], err
    assert sorted(os.listdir(tmp_path)) == ["afile"]


@pytest.mark.parametrize("disk", ["read-only", "full"])
def test_every_command_refuses_a_read_only_or_full_out_before_any_case(small_tmpfs, capsys, disk, monkeypatch):
    import resilience.runner.run as run_module

    def no_case(*a, **kw):
        raise AssertionError("a case ran")

    monkeypatch.setattr(run_module, "run_case", no_case)
    if disk == "full":
        _fill(small_tmpfs)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    before = sorted(os.listdir(small_tmpfs))
    says = "read-only" if disk == "read-only" else "no space left"
    for argv in [
        *(argv + ["--out", str(small_tmpfs / "runs")] for argv in COMMANDS.values()),
        ["corpus", "write", str(small_tmpfs / "corpus"), "--combos", "GLOBAL/torch_dist/sync"],
    ]:
        assert main(argv) == 2, argv
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and says in err[0] and "Traceback" not in err[0], (argv, err)
        assert sorted(os.listdir(small_tmpfs)) == before, argv


def test_rows_survive_in_results_jsonl_and_a_torn_line_is_skipped(tmp_path):
    folder = RunFolder.create(str(tmp_path), "r", {"title": "t", "cases": 3})
    folder.append(ResultRow("a", "GLOBAL/torch_dist/sync", PASS, column="a"))
    with open(folder.jsonl, "a") as f:
        f.write('{"scenario": "b", "com')  # what a kill in the middle of a write leaves
    again = RunFolder.open(folder.path)
    rows, torn = again.rows()
    assert [r.scenario for r in rows] == ["a"] and torn == 1
    assert again.meta["status"] == "running"
    assert main(["report", folder.path]) == 1  # incomplete: never 0
    meta = json.loads(open(os.path.join(folder.path, "run.json")).read())
    assert meta["status"] == "incomplete"
    assert "INCOMPLETE" in open(os.path.join(folder.path, "report.md")).read()


def test_report_of_a_folder_that_is_not_a_run_is_one_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "has no run.json" in capsys.readouterr().err
