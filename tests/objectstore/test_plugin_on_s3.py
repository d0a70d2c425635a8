"""The pytest plugin with `--resilience-storage s3`: a scenario file's cases run on real ranks against the S3
server the session starts, each in a bucket of its own, and the server is gone when the session ends."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("moto", reason="moto is not installed (pip install '.[s3]')")

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.multiprocess

KILL = """
name: kill-on-s3
topology: tp2pp1dp1
combinations: [GLOBAL/torch_dist/sync, TORCH_DCP/torch_dcp/async]
steps:
  - train: 1
  - save
  - finalize
  - train: 1
  - kill: {rank: 1, path: "@data", size: 1}
  - fault: {kind: slow_write, delay: 0.05, times: 5}
  - save
  - resume
"""


def test_a_scenario_file_runs_on_the_session_s3_server(pytester, tmp_path):
    pytester.makefile(".yaml", kill_on_s3=KILL)
    out = tmp_path / "runs"
    result = pytester.runpytest_subprocess(
        "kill_on_s3.yaml", "--resilience-storage", "s3", f"--resilience-out={out}", "-p", "no:cacheprovider"
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    (results,) = out.glob("*/results.json")
    rows = json.loads(results.read_text())
    assert {r["verdict"] for r in rows} == {"PASS"} and len(rows) == 2, rows
    for row in rows:
        with open(f"{row['case_dir']}/history.jsonl") as f:
            assert '"storage": "s3://' in f.readline()
        with open(f"{row['case_dir']}/scenario.yaml") as f:
            assert "storage: s3" in f.read()  # its replay runs on S3 too
