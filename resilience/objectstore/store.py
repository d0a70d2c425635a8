"""Where a run keeps its checkpoints (`--storage`): on the local disk, on the S3 server the run starts on
loopback (`s3`: moto, a bucket per case), or under a cluster's `s3://bucket/prefix` at `--endpoint-url` (a
prefix per case; credentials from the usual AWS variables), so the same run works against MinIO, Ceph RGW
or AWS.

A run resolves its storage once (`run_store`: the endpoint answers, the bucket exists, the credentials are
accepted, or one ConfigError before any case), and gives each case its own place (`RunStore.for_case`), as
plain data a rank process rebuilds its client from (`CaseStore`). Rank processes keep writing paths under
the case's checkpoint folder: the seam maps them to keys (storage.S3FileSystem)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from ..errors import ConfigError
from .url import S3Location

LOCAL = "local"  # files under the case folder
EMBEDDED = "s3"  # the run's own S3 server on loopback
STAGING = "s3-staging"  # in a case folder: the objects its ranks are writing, before their upload
FIX = "use --storage local, --storage s3 (an S3 server the run starts on 127.0.0.1) or --storage s3://bucket/prefix"


def check_storage(text: str | None) -> str:
    """`text` as given on a command line or in a scenario, checked: local, s3, or an s3:// URL that parses."""
    if text is None:
        return LOCAL
    if text in (LOCAL, EMBEDDED):
        return text
    if isinstance(text, str) and text.startswith("s3://"):
        S3Location.parse(text)
        return text
    raise ConfigError("--storage", f"unknown storage {text!r}", FIX)


def is_object_store(storage: str | None) -> bool:
    return check_storage(storage) != LOCAL


@dataclass(frozen=True)
class CaseStore:
    """One case's place on an object store: what its rank processes and its runner reach it by."""

    endpoint: str
    bucket: str
    prefix: str
    access_key: str | None = None  # None: the usual AWS variables
    secret_key: str | None = None
    region: str | None = None
    staging: str | None = None  # where each writer process stages objects, in a folder of its own (pid)

    @property
    def location(self) -> S3Location:
        return S3Location(self.bucket, self.prefix)

    def client(self, endpoint: str | None = None, access_key: str | None = None):
        """A boto3 client of this place, through `endpoint` when given (a proxy in front of the server)."""
        from .client import s3_client

        return s3_client(endpoint or self.endpoint, access_key or self.access_key, self.secret_key, self.region)

    def filesystem(self, root: str, endpoint: str | None = None, access_key: str | None = None):
        """The seam's interface mapping paths under `root` to this place's keys."""
        from .storage import S3FileSystem

        staging = None if self.staging is None else os.path.join(self.staging, str(os.getpid()))
        fsspec = {
            "key": access_key or self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": endpoint or self.endpoint, "region_name": self.region or "us-east-1"},
        }
        return S3FileSystem(
            self.client(endpoint, access_key), self.location, root, staging=staging, fsspec_options=fsspec
        )

    def staged_as(self, path: str, root: str) -> str | None:
        """The path under `root` of the object a writer stages at `path` (an open file of a rank), or None."""
        if self.staging is None:
            return None
        rel = os.path.relpath(path, self.staging)
        parts = rel.split(os.sep, 1)
        if rel.startswith("..") or len(parts) < 2:
            return None
        return os.path.join(root, parts[1])

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CaseStore:
        return cls(**d)

    def __str__(self) -> str:
        return f"{self.location} at {self.endpoint}"


@dataclass
class RunStore:
    """A run's object store: the endpoint, and the bucket and prefix under which each case gets its own place
    (None: the embedded server, where each case gets a bucket)."""

    endpoint: str
    location: S3Location | None
    access_key: str | None = None
    secret_key: str | None = None
    region: str | None = None
    server: object | None = None  # the EmbeddedS3 this run started, when it did

    @property
    def spec(self) -> str:
        """What a scenario file and a replay command say: s3, or the cluster's URL."""
        return EMBEDDED if self.location is None else str(self.location)

    def for_case(self, case_dir: str) -> CaseStore:
        """The case's own place: a new bucket on the embedded server, a prefix under the cluster's; its ranks
        stage their uploads in the case folder."""
        name = _case_name(case_dir)
        if self.location is None:
            bucket, prefix = self.server.bucket(name).bucket, ""  # type: ignore[attr-defined]
        else:
            bucket = self.location.bucket
            prefix = f"{self.location.prefix}/{name}" if self.location.prefix else name
        staging = os.path.join(os.path.abspath(case_dir), STAGING)
        return CaseStore(self.endpoint, bucket, prefix, self.access_key, self.secret_key, self.region, staging)


def _case_name(case_dir: str) -> str:
    """A bucket name of the case folder's last parts: readable, unique by a digest of its whole path."""
    parts = os.path.abspath(case_dir).rstrip(os.sep).split(os.sep)[-2:]
    readable = re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(os.path.abspath(case_dir).encode()).hexdigest()[:12]
    return f"{readable}-{digest}" if readable else f"case-{digest}"


_CURRENT: list[RunStore] = []  # the run's store, while run_store holds it (forked case workers inherit it)


def current_store(storage: str) -> RunStore | None:
    """The store the run holds, when it is the one `storage` names."""
    return next((s for s in reversed(_CURRENT) if s.spec == storage), None)


@contextlib.contextmanager
def run_store(storage: str | None, endpoint_url: str | None = None) -> Iterator[RunStore | None]:
    """The run's object store for the length of the run (None: local files), the current one meanwhile.
    `s3` starts the embedded server and stops it at the end; an s3:// URL is checked at `endpoint_url` (or
    AWS_ENDPOINT_URL)."""
    with _opened(storage, endpoint_url) as store:
        if store is not None:
            _CURRENT.append(store)
        try:
            yield store
        finally:
            if store is not None:
                _CURRENT.remove(store)


@contextlib.contextmanager
def _opened(storage: str | None, endpoint_url: str | None) -> Iterator[RunStore | None]:
    storage = check_storage(storage)
    if storage == LOCAL:
        if endpoint_url is not None:
            raise ConfigError("--endpoint-url", "an endpoint was given for local storage", FIX)
        yield None
        return
    if storage == EMBEDDED:
        if endpoint_url is not None:
            raise ConfigError(
                "--endpoint-url",
                "an endpoint was given with --storage s3, which starts its own server",
                "name the bucket and prefix to use there: --storage s3://bucket/prefix --endpoint-url URL",
            )
        from .server import ACCESS_KEY, REGION, SECRET_KEY, EmbeddedS3

        with EmbeddedS3() as server:
            yield RunStore(server.endpoint, None, ACCESS_KEY, SECRET_KEY, REGION, server)
        return
    yield _cluster_store(S3Location.parse(storage), endpoint_url or os.environ.get("AWS_ENDPOINT_URL"))


def _cluster_store(location: S3Location, endpoint_url: str | None) -> RunStore:
    from .client import check_bucket, check_endpoint_url, s3_client

    if not endpoint_url:
        raise ConfigError(
            "--endpoint-url",
            f"no endpoint for {location}",
            "give --endpoint-url http://host:port (or set AWS_ENDPOINT_URL)",
        )
    endpoint = check_endpoint_url(endpoint_url)
    check_bucket(s3_client(endpoint), endpoint, location)
    return RunStore(endpoint, location)


__all__ = [
    "EMBEDDED",
    "LOCAL",
    "CaseStore",
    "RunStore",
    "check_storage",
    "current_store",
    "is_object_store",
    "run_store",
]
