"""An S3 client (boto3) for an endpoint given by URL, and the check a run makes before any case: the endpoint
answers, the bucket exists, the credentials are accepted. Each failure is one ConfigError naming the thing
and the fix, raised before anything is written."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from ..errors import ConfigError
from .url import S3Location

CONNECT_TIMEOUT = 5.0  # seconds: a check of an endpoint that does not answer ends, it never hangs
REFUSED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken"}


def check_endpoint_url(url: str) -> str:
    """`url` when it is http(s)://host[:port] with nothing after the host but an optional '/'."""
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
    except ValueError:  # "Invalid IPv6 URL" and the like
        parts = None
    ok = (
        parts is not None
        and parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and parts.path in ("", "/")
        and not (parts.query or parts.fragment or parts.username)
    )
    try:
        ok = ok and parts is not None and (parts.port is None or 0 < parts.port < 65536)
    except ValueError:  # a port that is not a number
        ok = False
    if not ok:
        raise ConfigError(
            "--endpoint-url", f"{url!r} is not an endpoint URL", "write it as http://host:port (or https://host)"
        )
    return url.rstrip("/")


def s3_client(endpoint: str, access_key: str | None = None, secret_key: str | None = None, region: str | None = None):
    """A boto3 S3 client of `endpoint` (path-style addressing, as MinIO, Ceph RGW and moto want it), with
    the usual AWS variables for whatever is not given; short timeouts and no retries of its own."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=30,
        retries={"max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": "path"},
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key or os.environ.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY"),
        region_name=region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        config=config,
    )


def check_bucket(client, endpoint: str, location: S3Location) -> None:
    """ConfigError when nothing answers at `endpoint`, the bucket is missing or the credentials are refused."""
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    try:
        client.head_bucket(Bucket=location.bucket)
    except (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError) as e:
        raise ConfigError(
            "--endpoint-url",
            f"nothing answers at {endpoint} ({type(e).__name__})",
            "start the server or correct the URL",
        ) from None
    except NoCredentialsError:
        raise ConfigError(
            "credentials", f"no credentials for {endpoint}", "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ) from None
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("404", "NoSuchBucket") or status == 404:
            raise ConfigError(
                "--storage", f"bucket {location.bucket!r} does not exist at {endpoint}", "create it, or name another"
            ) from None
        if code in REFUSED or code == "403" or status == 403:
            raise ConfigError(
                "credentials",
                f"{endpoint} refused the credentials for bucket {location.bucket!r} ({code or status})",
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to a key the endpoint accepts",
            ) from None
        raise ConfigError(
            "--storage", f"{endpoint} answered {code or status} for {location}", "check the endpoint"
        ) from None
