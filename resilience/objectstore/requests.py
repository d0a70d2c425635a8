"""What one HTTP request to an S3 server is: its operation (faults.base.HTTP_OPS, the names a fault record's
target.op uses), bucket and key, and the rank that sent it.

Path-style addressing only (`/bucket/key`, what objectstore.client asks of boto3). The rank is read from the
access key id a request is signed with: each rank's client uses its own key (`rank_access_key`) with the
run's one secret, which an S3 server without authentication (moto's default) accepts as any other; any
other key (the runner's own client) belongs to no rank, and no fault reaches it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from urllib.parse import parse_qs, unquote

from ..errors import ConfigError

RANK_KEY_PREFIX = "RESILIENCERANK"  # + the rank, zero-padded: upper-case letters and digits, as AWS key ids are
RANK_DIGITS = 6
_RANK_KEY = re.compile(rf"{RANK_KEY_PREFIX}(\d{{{RANK_DIGITS},}})")
_SIGV4 = re.compile(r"Credential=([^/,\s]+)/")  # AWS4-HMAC-SHA256 Credential=AKID/date/region/s3/aws4_request
_SIGV2 = re.compile(r"AWS ([^:\s]+):")  # AWS AKID:signature


@dataclass(frozen=True)
class S3Request:
    """One request, classified: `op` (HTTP_OPS), the bucket ('' for the service itself), the key ('' for a
    bucket; for a listing, its prefix), and what the operation names besides."""

    op: str
    bucket: str = ""
    key: str = ""
    range: str | None = None  # a get's Range header
    upload_id: str | None = None  # a multipart upload's steps
    part: int | None = None  # mpu_part's number
    copy_source: str | None = None  # a copy's (or a part copied from an object's) source, as sent


def classify(method: str, path: str, query: str, headers: Mapping[str, str]) -> S3Request:
    """The S3 operation of a request: `path` and `query` as in its request line (split at '?'), `headers`
    with lower-case names."""
    bucket, _, key = unquote(path.lstrip("/")).partition("/")
    q = parse_qs(query, keep_blank_values=True)
    upload = q.get("uploadId", [None])[0]
    part = _part_number(q)
    source = headers.get("x-amz-copy-source")
    base = S3Request("bucket", bucket, key, upload_id=upload)
    method = method.upper()
    if not bucket:
        return S3Request("bucket")
    if not key:
        return _on_bucket(method, q, bucket)
    if method == "PUT":
        if upload is not None and part is not None:
            return replace(base, op="mpu_part", part=part, copy_source=source)
        if source is not None:
            return replace(base, op="copy", copy_source=source)
        return replace(base, op="put" if not _subresource(q) else "bucket")
    if method == "POST" and "uploads" in q:
        return replace(base, op="mpu_create")
    if method == "POST" and upload is not None:
        return replace(base, op="mpu_complete")
    if method == "DELETE":
        return replace(base, op="mpu_abort" if upload is not None else "delete")
    if method == "GET" and upload is not None:
        return replace(base, op="list")  # the parts of an upload
    if method in ("GET", "HEAD") and not _subresource(q):
        return replace(base, op="get" if method == "GET" else "head", range=headers.get("range"))
    return base


def _on_bucket(method: str, q: dict[str, list[str]], bucket: str) -> S3Request:
    if method == "GET" and (not _subresource(q, ("list-type", "prefix", "delimiter", "uploads", "versions"))):
        return S3Request("list", bucket=bucket, key=q.get("prefix", [""])[0])
    if method == "POST" and "delete" in q:
        return S3Request("delete", bucket=bucket)  # several keys at once, named in the body
    return S3Request("bucket", bucket=bucket)


# query parameters that only shape a request; any other names a sub-resource (?acl, ?tagging, ...)
_PLAIN = frozenset(
    {
        "x-id",
        "continuation-token",
        "start-after",
        "max-keys",
        "encoding-type",
        "fetch-owner",
        "marker",
        "key-marker",
        "upload-id-marker",
        "max-uploads",
        "version-id-marker",
        "versionId",
        "partNumber",
        "response-content-type",
        "response-content-disposition",
        "response-content-encoding",
        "response-cache-control",
        "response-expires",
        "response-content-language",
    }
)


def _subresource(q: Mapping[str, list[str]], also: tuple[str, ...] = ()) -> bool:
    """Whether the query names a sub-resource: anything but the shaping parameters (and `also`), or a
    presigned request's X-Amz-* ones."""
    return any(k not in _PLAIN and k not in also and not k.startswith("X-Amz-") for k in q)


def _part_number(q: Mapping[str, list[str]]) -> int | None:
    text = q.get("partNumber", [""])[0]
    return int(text) if text.isdigit() else None


# ---- ranks -------------------------------------------------------------------------------------------
def rank_access_key(rank: int) -> str:
    """The access key id rank `rank`'s client signs with: RESILIENCERANK000003 for rank 3 (20 characters,
    upper-case letters and digits, as an AWS key id is)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ConfigError("rank", f"{rank!r} is not a rank", "give a non-negative integer")
    return f"{RANK_KEY_PREFIX}{rank:0{RANK_DIGITS}d}"


def rank_of(access_key: str | None) -> int | None:
    """The rank whose key `access_key` is (rank_access_key); None for any other key."""
    m = _RANK_KEY.fullmatch(access_key or "")
    return int(m.group(1)) if m else None


def access_key_of(headers: Mapping[str, str], query: str = "") -> str | None:
    """The access key id a request is signed with: from its Authorization header (SigV4 or SigV2), or a
    presigned URL's X-Amz-Credential; None for an anonymous request."""
    auth = headers.get("authorization", "")
    m = _SIGV4.search(auth) or _SIGV2.match(auth)
    if m:
        return m.group(1)
    credential = parse_qs(query).get("X-Amz-Credential", [""])[0]
    return credential.split("/", 1)[0] or None


def rank_of_request(headers: Mapping[str, str], query: str = "") -> int | None:
    """The rank that sent a request (from its access key), or None."""
    return rank_of(access_key_of(headers, query))


__all__ = [
    "RANK_KEY_PREFIX",
    "S3Request",
    "access_key_of",
    "classify",
    "rank_access_key",
    "rank_of",
    "rank_of_request",
]
