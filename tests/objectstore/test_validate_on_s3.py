"""`resilience validate` with checkpoints on an object store: --local starts an S3 server for its node agents
(torchrun, real restarts), every checkpoint goes to the bucket and none to the shared folder; on a cluster
the store must be one every node reaches, named with its endpoint."""

from __future__ import annotations

import os
import re

import pytest

from resilience.cli import main
from resilience.cluster.spec import ClusterPlan
from resilience.errors import ConfigError

pytest.importorskip("moto", reason="moto is not installed (pip install '.[s3]')")


@pytest.mark.multiprocess
def test_validate_local_keeps_the_checkpoints_on_the_s3_server_it_starts(tmp_path, capsys):
    code = main(
        ["validate", "--local", "--storage", "s3", "--combos", "GLOBAL/torch_dist/sync", "--out", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "--storage s3://validate/" in out and re.search(r"GLOBAL/torch_dist/sync\s+PASS", out), out
    (shared,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    ckpt = shared / "ckpt"
    assert not ckpt.exists() or not any(os.scandir(ckpt)), list(ckpt.rglob("*"))  # all of it went to the bucket


@pytest.mark.parametrize(
    "storage, endpoint, says",
    [
        ("s3", None, "other nodes cannot reach"),
        ("s3://bucket/run", None, "no endpoint for s3://bucket/run"),
        ("s3://Bad_Bucket/run", "http://127.0.0.1:9000", "not a valid S3 bucket name"),
        ("s3://bucket/run", "ftp://x", "is not an endpoint URL"),
    ],
)
def test_a_cluster_store_must_be_one_every_node_reaches(storage, endpoint, says):
    with pytest.raises(ConfigError, match=says):
        ClusterPlan(storage=storage, endpoint_url=endpoint)
