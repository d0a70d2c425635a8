"""Stock DCP's fsspec writer and reader with s3fs against the embedded S3 server: the path users take to
write checkpoints straight to object storage round-trips, with and without its per-file sync (torch 2.13 no
longer crashes on s3fs's fsync, pytorch#142396)."""

import pytest
import torch

pytest.importorskip("moto", reason="moto is not installed (pip install '.[s3]')")
pytest.importorskip("s3fs", reason="s3fs is not installed (pip install '.[s3]')")

from resilience.objectstore.server import ACCESS_KEY, REGION, SECRET_KEY, EmbeddedS3  # noqa: E402


@pytest.mark.parametrize("sync_files", [True, False])
def test_dcp_saves_and_loads_through_fsspec_on_s3(sync_files):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    with EmbeddedS3() as s3:
        s3.bucket("dcp")
        kw = {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": s3.endpoint, "region_name": REGION},
        }
        state = {"w": torch.arange(64.0).reshape(8, 8), "step": torch.tensor(3)}
        dcp.save(state, storage_writer=FsspecWriter("s3://dcp/step-3", sync_files=sync_files, **kw))
        keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket="dcp")["Contents"]]
        assert "step-3/.metadata" in keys and any(k.endswith(".distcp") for k in keys), keys
        out = {"w": torch.zeros(8, 8), "step": torch.tensor(0)}
        dcp.load(out, storage_reader=FsspecReader("s3://dcp/step-3", **kw))
    assert torch.equal(out["w"], state["w"]) and int(out["step"]) == 3
