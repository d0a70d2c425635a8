"""The hostile and careless scenario files of tests/redteam/scenarios: each is one clear error (exit status 2
from the command, no traceback) or, for the few that are fine as scenarios, one that validates; within a
bound (subprocess timeouts), touching nothing outside the test's folders."""

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resilience.errors import ConfigError
from resilience.runner.scenario import Scenario, ScenarioError, load_file

HERE = Path(__file__).parent
FILES = sorted((HERE / "scenarios").glob("*.yaml"))
ROOT = HERE.parents[1]
# Valid as a scenario: the backend is a well-formed module:factory; importing it fails when the run
# starts, which `resilience run` reports as one error (checked below).
VALID = {"t45_backend_bad.yaml"}
# What each refusal must be about: the field (or part of the message) that names the file's intent.
INTENT = {
    "t01_empty.yaml": "is empty",
    "t02_comment.yaml": "is empty",
    "t03_list.yaml": "must be a mapping",
    "t04_scalar.yaml": "must be a mapping",
    "t05_unknown_step.yaml": "unknown step",
    "t06_train_str.yaml": "steps.0.train",
    "t07_train_neg.yaml": "steps.0.train",
    "t08_train_huge.yaml": "steps.0.train",
    "t09_pyobj.yaml": "!!python/object",
    "t10_pyname.yaml": "!!python/name",
    "t11_pyobj_scalar.yaml": "!!python/object",
    "t12_bomb.yaml": "aliases are expanded",
    "t13_recursive.yaml": "recursive alias",
    "t14_nonutf8.yaml": "offset 6",
    "t15_complexkey.yaml": "used as a key",
    "t16_tags_int.yaml": "tags",
    "t17_timeout_nan.yaml": "timeout",
    "t18_timeout_inf.yaml": "timeout",
    "t19_timeout_neg.yaml": "timeout",
    "t20_topo_huge.yaml": "topology",
    "t21_topo_zero.yaml": "topology",
    "t22_topo_list.yaml": "topology",
    "t23_model_huge.yaml": "model.hidden",
    "t24_model_neg.yaml": "model.hidden",
    "t25_model_lr_str.yaml": "model.lr",
    "t26_model_list.yaml": "model",
    "t27_combo_bad.yaml": "combinations.0",
    "t28_combo_invalid.yaml": "combinations.0",
    "t29_crash_rank_big.yaml": "world size 1",
    "t30_crash_rank_neg.yaml": "crash.rank",
    "t31_crash_bad_phase.yaml": "crash.phase",
    "t32_crash_bytes_neg.yaml": "crash.after_bytes",
    "t33_fault_unknown.yaml": "meteor",
    "t34_corrupt_unknown.yaml": "shred",
    "t35_corrupt_path_escape.yaml": "leaves",
    "t36_resume_bad_topo.yaml": "resume.topology",
    "t37_resume_cont_neg.yaml": "resume.continue",
    "t38_expect_unknown.yaml": "expect.foo",
    "t39_unknown_top.yaml": "stepz",
    "t40_seed_float.yaml": "seed",
    "t41_seed_huge.yaml": "seed",
    "t42_seed_neg.yaml": "seed",
    "t43_step_two_keys.yaml": "one kind",
    "t44_kill_huge_after.yaml": "kill.after",
    "t46_lose_unsynced_huge.yaml": "max_states",
    "t47_binary.yaml": "not UTF-8",
    "t48_deep_nest.yaml": "deeper than",
    "t50_dup_keys.yaml": "given twice",
    "t51_model_lr_nan.yaml": "model.lr",
    "t52_model_num_layers_huge.yaml": "model.num_layers",
    "t53_model_vocab_huge.yaml": "model.vocab",
    "t54_bool_train.yaml": "steps.0.train",
    "t55_name_slash.yaml": "name",
    "t56_resume_cont_huge.yaml": "resume.continue",
    "t57_corrupt_rank_str.yaml": "corrupt.rank",
    "t58_fault_bad_errno.yaml": "errno",
    "t59_tags_str.yaml": "tags",
    "t60_yaml_tag_custom.yaml": "!foo",
}
# Also run as the installed command, each in its own interpreter: the alias bomb, the valid one, a path escape.
CLI_SUBSET = ["t12_bomb.yaml", "t45_backend_bad.yaml", "t55_name_slash.yaml"]


def _outside() -> set[str]:
    return set(glob.glob("/tmp/resilience-redteam-*"))


@pytest.fixture
def nothing_outside():
    before = _outside()
    yield
    assert _outside() == before, f"created outside the test: {sorted(_outside() - before)}"


def test_every_file_has_a_known_intent():
    assert {f.name for f in FILES} == set(INTENT) | VALID


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_a_redteam_file_is_one_clear_error_or_valid(path, nothing_outside):
    if path.name in VALID:
        assert isinstance(load_file(path), Scenario)
        return
    with pytest.raises(ScenarioError) as e:
        load_file(path)
    message = str(e.value)
    assert message.startswith(str(path)), message
    assert INTENT[path.name] in message, message
    assert all(p.line is None or p.line >= 1 for p in e.value.problems)


def _python_env() -> dict:
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), PYTHONWARNINGS="ignore"
    )


_DRIVER = """
import contextlib, io, json, sys, traceback
from resilience.cli import main
out_dir = sys.argv[1]
for f in sys.argv[2:]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["run", f, "--out", out_dir])
    except BaseException:
        rc, err = None, io.StringIO(traceback.format_exc())
    print(json.dumps({"file": f, "rc": rc, "stderr": err.getvalue()}))
"""


def test_every_file_through_the_command_in_one_fresh_process(tmp_path, nothing_outside):
    """Each file through `resilience run`'s entry point: exit status 2 and one error, never an exception;
    the whole set within the subprocess timeout."""
    out = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(tmp_path / "runs"), *map(str, FILES)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_python_env(),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [Path(r["file"]).name for r in rows] == [f.name for f in FILES]
    for r in rows:
        assert r["rc"] == 2 and "Traceback" not in r["stderr"], r
        assert r["stderr"].startswith("resilience run: error: "), r
        if Path(r["file"]).name not in VALID:
            assert r["stderr"].count("resilience run: error: ") == 1, r
    assert not list((tmp_path / "runs").glob("*/cases/*/ranks/*/*")), "a rank ran"


def _run_cli(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "resilience.cli", "run", *args, "--out", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=180,
        env=_python_env(),
        cwd=tmp_path,
    )


@pytest.mark.parametrize("name", CLI_SUBSET)
def test_resilience_run_refuses_a_redteam_file_with_exit_2(name, tmp_path, nothing_outside):
    out = _run_cli([str(HERE / "scenarios" / name)], tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "Traceback" not in text, text
    assert "error:" in out.stderr, text
    if name not in VALID:  # refused while reading: no rank ran, no case folder exists
        assert not list((tmp_path / "runs").glob("*/cases/*")), text


def test_a_5_mb_single_line_file_is_refused(tmp_path, nothing_outside):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * 5_000_000)
    with pytest.raises(ScenarioError, match="larger than the limit"):
        load_file(big)
    out = _run_cli([str(big)], tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "larger than the limit" in out.stderr, out.stderr


def test_an_empty_folder_is_refused(tmp_path, nothing_outside):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="not a regular file"):
        load_file(empty)
    out = _run_cli([str(empty)], tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
