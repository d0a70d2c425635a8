"""Bad input to `resilience job`: one clear error naming the thing and the fix, exit status 2, and
nothing left behind: no run folder, no mount (the suite's fixture checks), no process of the job."""

import sys

import pytest

from resilience.cli import main
from resilience.errors import ConfigError

from .conftest import quick

pytestmark = pytest.mark.multiprocess


def _refused(tmp_path, capsys, *args):
    out = tmp_path / "runs"
    code = main(["job", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not out.exists(), list(out.iterdir())  # the run folder it started is gone, and its parent
    return err.split("error: ", 1)[1]


def test_a_command_that_does_not_start(tmp_path, capsys):
    said = _refused(tmp_path, capsys, "--", "no-such-trainer", "--ckpt", "{ckpt}")
    assert said.startswith("command: cannot start 'no-such-trainer'")


def test_a_command_that_fails_on_its_own_shows_its_first_lines(tmp_path, capsys, fuse):
    said = _refused(tmp_path, capsys, "--", sys.executable, "-c", "print('loading config'); raise SystemExit(3)")
    assert "failed on its own, without a fault (exit 3)" in said and "    loading config" in said


def test_a_metric_pattern_that_matches_nothing_shows_the_jobs_first_lines(tmp_path, capsys, fuse):
    said = _refused(tmp_path, capsys, "--", *quick("--variant", "silent"))
    assert said.startswith("--metric: no line of the golden run matches any built-in metric pattern")
    assert "    saved checkpoint step 4" in said and "give --metric REGEX" in said
    said = _refused(tmp_path, capsys, "--metric", r"it (?P<step>\d+) l (?P<loss>\S+)", "--", *quick())
    assert "matches --metric it (?P<step>" in said and "    step 1 loss 0.333355" in said


def test_a_job_that_never_writes_to_its_checkpoint_folder(tmp_path, capsys, fuse):
    said = _refused(tmp_path, capsys, "--", *quick("--variant", "no_ckpt"))
    assert "never wrote to its checkpoint folder" in said and "--ckpt-dir PATH" in said


def test_a_job_that_is_not_deterministic_needs_rtol(tmp_path, capsys, fuse):
    said = _refused(tmp_path, capsys, "--", *quick("--variant", "noisy"))
    assert said.startswith("--rtol: the job is not deterministic: two runs without a fault differ (step 1: loss")
    assert "in golden run 1" in said and "give --rtol R" in said
    code = main(["job", "--out", str(tmp_path / "tolerant"), "--rtol", "0.5", "--", *quick("--variant", "noisy")])
    assert code == 0, capsys.readouterr().err  # within the tolerance: the golden run stands (a dry run)


def test_a_ckpt_dir_that_is_not_a_folder_or_is_inside_the_run_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    said = _refused(tmp_path, capsys, "--ckpt-dir", str(tmp_path / "file"), "--", *quick())
    assert said.startswith(f"--ckpt-dir: {tmp_path / 'file'} is not a folder")
    said = _refused(tmp_path, capsys, "--ckpt-dir", str(tmp_path / "nowhere"), "--", *quick())
    assert "does not exist" in said
    inside = tmp_path / "runs" / "ckpt"
    inside.mkdir(parents=True)
    code = main(["job", "--out", str(tmp_path / "runs"), "--ckpt-dir", str(inside), "--", *quick()])
    assert (
        code == 2
        and "overlap" in capsys.readouterr().err
        and sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["ckpt"]
    )


def test_an_unknown_column(tmp_path, capsys):
    said = _refused(tmp_path, capsys, "--column", "kill-everything", "--", *quick())
    assert said.startswith("--column: unknown column 'kill-everything' (use one of kill-rank-write,")


def test_nodes_out_of_range_or_a_command_that_fixes_its_node(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["job", "--nodes", "9", "--", *quick()])
    assert "a number of nodes from 1 to 8, got '9'" in capsys.readouterr().err
    said = _refused(tmp_path, capsys, "--nodes", "2", "--", *quick("--node-rank", "0"))
    assert "--node-rank 0 would make every node the same one" in said and "--node-rank {node}" in said
    said = _refused(tmp_path, capsys, "--nodes", "2", "--", *quick("--standalone"))
    assert "--standalone makes each node a job of its own" in said


def test_no_command(tmp_path, capsys):
    assert "no training command" in _refused(tmp_path, capsys, "--matrix")


@pytest.mark.parametrize("curve", ['{"format_version": 2, "curve": {}, "last_step": 1}', "[1, 2]"])
def test_a_kept_golden_run_of_another_format_is_one_clear_error(tmp_path, curve):
    from resilience.job.golden import CURVE, Reference

    (tmp_path / CURVE).write_text(curve)
    with pytest.raises(ConfigError) as e:
        Reference.load(str(tmp_path))
    assert e.value.field == "--golden" and "holds no golden run that can be read" in str(e.value)
    assert "this version reads 1" in str(e.value)
