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


def test_each_node_gets_torchruns_environment_and_its_placeholders():
    cmd = JobCommand.parse([sys.executable, "train.py", "--node-rank", "{node}", "--port={port}"], nodes=2)
    assert cmd.resolved("/c", 1, 4242)[2:] == ["--node-rank", "1", "--port=4242"]
    env = cmd.env("/c", "t", node=1, port=4242)
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_MASTER_PORT"]) == ("2", "1", "4242")
    assert env["PET_MASTER_ADDR"] == "127.0.0.1" and "PET_NNODES" not in JobCommand.parse([sys.executable]).env(
        "/c", "t"
    )
    for fixed in (["--nnodes", "3"], ["--master_port=29500"]):
        with pytest.raises(ConfigError, match="would make every node the same one"):
            JobCommand.parse([sys.executable, *fixed], nodes=2)
    assert JobCommand.parse([sys.executable, "--nnodes", "2"], nodes=2).nodes == 2


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
