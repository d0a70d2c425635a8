"""The command after `--` and its checkpoint folder: {ckpt} replaced, RESILIENCE_CKPT_DIR exported, and a
--ckpt-dir that cannot be mounted refused before anything runs."""

import sys

import pytest

from resilience.errors import ConfigError
from resilience.job.command import CKPT_ENV, JobCommand


def test_the_placeholder_and_the_environment():
    cmd = JobCommand.parse([sys.executable, "train.py", "--save={ckpt}/x", "--load", "{ckpt}"])
    assert cmd.resolved("/c") == [sys.executable, "train.py", "--save=/c/x", "--load", "/c"]
    assert cmd.env("/c", "t")[CKPT_ENV] == "/c" and cmd.name == "train.py"


def test_a_program_that_does_not_exist():
    with pytest.raises(ConfigError, match="cannot start 'no-such-trainer'"):
        JobCommand.parse(["no-such-trainer", "--x"])


def test_a_ckpt_dir_that_is_not_a_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    for bad, says in ((tmp_path / "missing", "does not exist"), (tmp_path / "file", "is not a folder")):
        with pytest.raises(ConfigError, match=says) as e:
            JobCommand.parse([sys.executable], ckpt_dir=str(bad))
        assert e.value.field == "--ckpt-dir"


def test_a_ckpt_dir_inside_the_run_folder_or_holding_it(tmp_path):
    (tmp_path / "runs" / "ckpt").mkdir(parents=True)
    for ckpt, out in ((tmp_path / "runs" / "ckpt", tmp_path / "runs"), (tmp_path, tmp_path / "runs")):
        with pytest.raises(ConfigError, match="overlap"):
            JobCommand.parse([sys.executable], ckpt_dir=str(ckpt), out=str(out))
