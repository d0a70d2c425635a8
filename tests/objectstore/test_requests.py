"""What an HTTP request to an S3 server is (objectstore.requests): its operation, bucket and key from what
boto3 sends, and the rank from the access key it is signed with. Hand-written requests, no server."""

import pytest

from resilience.errors import ConfigError
from resilience.faults import HTTP_OPS
from resilience.objectstore.requests import (
    S3Request,
    access_key_of,
    classify,
    rank_access_key,
    rank_of,
    rank_of_request,
)


@pytest.mark.parametrize(
    "method, target, headers, expected",
    [
        ("PUT", "/bk/a/b.pt?x-id=PutObject", {}, S3Request("put", "bk", "a/b.pt")),
        ("PUT", "/bk/a%20b/c.pt", {}, S3Request("put", "bk", "a b/c.pt")),
        ("PUT", "/bk/b.pt", {"x-amz-copy-source": "bk/a.pt"}, S3Request("copy", "bk", "b.pt", copy_source="bk/a.pt")),
        ("POST", "/bk/b.pt?uploads", {}, S3Request("mpu_create", "bk", "b.pt")),
        ("PUT", "/bk/b.pt?partNumber=3&uploadId=U1", {}, S3Request("mpu_part", "bk", "b.pt", upload_id="U1", part=3)),
        ("POST", "/bk/b.pt?uploadId=U1", {}, S3Request("mpu_complete", "bk", "b.pt", upload_id="U1")),
        ("DELETE", "/bk/b.pt?uploadId=U1", {}, S3Request("mpu_abort", "bk", "b.pt", upload_id="U1")),
        ("GET", "/bk/b.pt", {"range": "bytes=0-9"}, S3Request("get", "bk", "b.pt", range="bytes=0-9")),
        ("GET", "/bk/b.pt?partNumber=1", {}, S3Request("get", "bk", "b.pt")),
        ("HEAD", "/bk/b.pt", {}, S3Request("head", "bk", "b.pt")),
        ("GET", "/bk?list-type=2&prefix=run%2Fiter&delimiter=%2F", {}, S3Request("list", "bk", "run/iter")),
        ("GET", "/bk/?prefix=run", {}, S3Request("list", "bk", "run")),  # list_objects (v1)
        ("GET", "/bk?uploads", {}, S3Request("list", "bk")),  # the multipart uploads in progress
        ("GET", "/bk/b.pt?uploadId=U1", {}, S3Request("list", "bk", "b.pt", upload_id="U1")),  # an upload's parts
        ("DELETE", "/bk/b.pt", {}, S3Request("delete", "bk", "b.pt")),
        ("POST", "/bk?delete", {}, S3Request("delete", "bk")),  # several keys, named in the body
        ("PUT", "/bk", {}, S3Request("bucket", "bk")),  # create_bucket
        ("HEAD", "/bk", {}, S3Request("bucket", "bk")),
        ("GET", "/bk?location", {}, S3Request("bucket", "bk")),
        ("DELETE", "/bk", {}, S3Request("bucket", "bk")),
        ("PUT", "/bk/b.pt?tagging", {}, S3Request("bucket", "bk", "b.pt")),  # an object's sub-resource
        ("GET", "/", {}, S3Request("bucket")),  # list_buckets
    ],
)
def test_each_request_is_classified(method, target, headers, expected):
    path, _, query = target.partition("?")
    got = classify(method, path, query, headers)
    assert got == expected and got.op in HTTP_OPS


def test_every_operation_name_is_one_a_fault_can_name():
    ops = {"put", "copy", "mpu_create", "mpu_part", "mpu_complete", "mpu_abort", "get", "head", "list", "delete"}
    assert set(HTTP_OPS) == ops | {"bucket"}


SIGV4 = (
    "AWS4-HMAC-SHA256 Credential={key}/20260101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host;x-amz-date, Signature=abc123"
)


def test_a_rank_key_is_a_valid_aws_key_id_and_names_its_rank_back():
    for rank in (0, 3, 127, 999_999, 1_234_567):
        key = rank_access_key(rank)
        assert key.isalnum() and key.upper() == key and 16 <= len(key) <= 128
        assert rank_of(key) == rank
    assert rank_access_key(3) == "RESILIENCERANK000003"
    assert [rank_of(k) for k in ("resilience", "AKIAIOSFODNN7EXAMPLE", "RESILIENCERANK12", "", None)] == [None] * 5
    for bad in (-1, True, "3"):
        with pytest.raises(ConfigError):
            rank_access_key(bad)


def test_the_rank_is_read_from_the_signature_of_a_request():
    key = rank_access_key(5)
    assert rank_of_request({"authorization": SIGV4.format(key=key)}) == 5
    assert access_key_of({"authorization": f"AWS {key}:c2lnbmF0dXJl"}) == key  # SigV2
    query = f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={key}%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
    assert rank_of_request({}, query) == 5  # a presigned URL
    assert rank_of_request({"authorization": SIGV4.format(key="resilience")}) is None  # the runner's own client
    assert rank_of_request({}) is None  # anonymous
