"""The storage seam's interface over a real S3 server (moto on loopback): what an object store keeps and
what it cannot do (no rename, no folders) are visible, never faked."""

import errno
import re

import pytest

from resilience.objectstore import S3Location
from resilience.storage.base import FileSystem, write_all

pytest.importorskip("moto", reason="moto is not installed (pip install '.[s3]')")
pytest.importorskip("boto3", reason="boto3 is not installed (pip install '.[s3]')")

from resilience.objectstore.server import EmbeddedS3  # noqa: E402
from resilience.objectstore.storage import S3FileSystem  # noqa: E402

ROOT = "/ckpt"


@pytest.fixture(scope="module")
def server():
    with EmbeddedS3() as s3:
        yield s3


@pytest.fixture
def fs(server, request):
    name = re.sub(r"[^a-z0-9]+", "-", f"case-{request.node.name}".lower())[:50].strip("-")
    loc = server.bucket(name)
    return S3FileSystem(server.client(), S3Location(loc.bucket, "run/a"), ROOT, part_bytes=5 << 20)


def test_it_is_a_file_system_of_the_seam(fs):
    assert isinstance(fs, FileSystem) and fs.atomic_rename is False


def test_an_object_appears_whole_on_close_with_the_digest_of_what_was_written(fs):
    import xxhash

    data = bytes(range(256)) * 4096  # 1 MiB: one PUT
    with fs.open_write(f"{ROOT}/iter_0000001/a.pt") as f:
        write_all(f, data)
        assert not fs.exists(f"{ROOT}/iter_0000001/a.pt")  # nothing before close
    assert f.digest == xxhash.xxh3_128_hexdigest(data) and f.size == len(data)
    assert fs.open_read(f"{ROOT}/iter_0000001/a.pt").read() == data
    assert fs.size(f"{ROOT}/iter_0000001/a.pt") == len(data)
    key = "run/a/iter_0000001/a.pt"
    assert fs.client.head_object(Bucket=fs.location.bucket, Key=key)["ContentLength"] == len(data)


def test_a_large_object_goes_in_parts_and_leaves_no_upload_behind(fs):
    data = b"x" * (11 << 20)  # three parts of 5 MiB
    with fs.open_write(f"{ROOT}/big.distcp") as f:
        write_all(f, data)
    assert fs.open_read(f"{ROOT}/big.distcp").read() == data
    assert not fs.client.list_multipart_uploads(Bucket=fs.location.bucket).get("Uploads")


def test_folders_are_prefixes_and_listing_decides_what_is_seen(fs):
    for name in ("iter_0000002/b", "iter_0000002/sub/c", "iter_0000003/d", "latest_checkpointed_iteration.txt"):
        with fs.open_write(f"{ROOT}/{name}") as f:
            f.write(b"1")
    fs.mkdir(f"{ROOT}/empty")  # nothing: no key under it
    assert fs.listdir(ROOT) == ["iter_0000002", "iter_0000003", "latest_checkpointed_iteration.txt"]
    assert fs.listdir(f"{ROOT}/iter_0000002") == ["b", "sub"]
    assert fs.is_dir(f"{ROOT}/iter_0000002") and not fs.is_dir(f"{ROOT}/empty") and not fs.exists(f"{ROOT}/empty")
    fs.rmtree(f"{ROOT}/iter_0000002")
    assert fs.listdir(ROOT) == ["iter_0000003", "latest_checkpointed_iteration.txt"]


def test_a_rename_is_a_copy_then_a_delete_and_an_exchange_is_refused(fs):
    for name in ("x", "y/z"):
        with fs.open_write(f"{ROOT}/.staging/{name}") as f:
            f.write(name.encode())
    fs.rename(f"{ROOT}/.staging", f"{ROOT}/iter_0000004")
    assert fs.listdir(f"{ROOT}/iter_0000004") == ["x", "y"] and not fs.exists(f"{ROOT}/.staging")
    assert fs.open_read(f"{ROOT}/iter_0000004/y/z").read() == b"y/z"
    with pytest.raises(OSError) as e:
        fs.exchange(f"{ROOT}/iter_0000004", f"{ROOT}/other")
    assert e.value.errno == errno.ENOTSUP


def test_a_missing_object_reads_as_a_missing_file(fs):
    for op in (fs.open_read, fs.size, fs.unlink):
        with pytest.raises(FileNotFoundError):
            op(f"{ROOT}/nosuch")
    with pytest.raises(FileNotFoundError):
        fs.rename(f"{ROOT}/nosuch", f"{ROOT}/other")


@pytest.mark.parametrize("path", ["/elsewhere/x", f"{ROOT}/../x"])
def test_a_path_outside_the_root_is_refused(fs, path):
    with pytest.raises(OSError) as e:
        fs.open_write(path)
    assert e.value.errno == errno.EXDEV


def test_a_stream_has_no_file_descriptor(fs):
    import io

    with fs.open_write(f"{ROOT}/f") as f:
        with pytest.raises(io.UnsupportedOperation):
            f.fileno()
