"""Where checkpoints go on an object store: `s3://bucket/prefix`, parsed once into a typed location, and the
keys under it, none of which may leave the prefix (a key is built from names a checkpoint or a scenario
gave, which are untrusted)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import ConfigError

# S3's rules for a bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with
# a letter or digit, not shaped like an IP address
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IP = re.compile(r"\d+\.\d+\.\d+\.\d+")
MAX_KEY_BYTES = 1024  # S3's limit on a key, in UTF-8


@dataclass(frozen=True)
class S3Location:
    """A bucket and a prefix in it ('' for the whole bucket; otherwise without a leading or trailing '/')."""

    bucket: str
    prefix: str = ""

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @classmethod
    def parse(cls, text: str, field: str = "--storage") -> S3Location:
        """'s3://bucket' or 's3://bucket/some/prefix'; one ConfigError naming `field` and the fix otherwise."""
        if not isinstance(text, str) or not text.startswith("s3://"):
            raise ConfigError(field, f"{text!r} is not an s3:// URL", "write it as s3://bucket/prefix")
        try:
            parts = urlsplit(text)
        except ValueError as e:  # "Invalid IPv6 URL" and the like
            raise ConfigError(field, f"{text!r} does not parse ({e})", "write it as s3://bucket/prefix") from None
        if parts.query or parts.fragment or "@" in parts.netloc or ":" in parts.netloc:
            raise ConfigError(
                field,
                f"{text!r} holds more than a bucket and a prefix",
                "write it as s3://bucket/prefix (no user, port, query or fragment; the endpoint is --endpoint-url)",
            )
        bucket = parts.netloc
        if not _BUCKET.fullmatch(bucket) or _IP.fullmatch(bucket) or ".." in bucket:
            raise ConfigError(
                field,
                f"bucket name {bucket!r} is not a valid S3 bucket name",
                "use 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit",
            )
        prefix = parts.path.strip("/")
        if prefix:
            check_relative(prefix, field)
        return cls(bucket, prefix)

    def key(self, relpath: str) -> str:
        """The key of `relpath` under the prefix; a path that would leave it is a ConfigError."""
        check_relative(relpath, "key")
        key = f"{self.prefix}/{relpath}" if self.prefix else relpath
        if len(key.encode()) > MAX_KEY_BYTES:
            raise ConfigError("key", f"{key[:60]!r}... is longer than S3's {MAX_KEY_BYTES} bytes", "use shorter names")
        return key

    def relative(self, key: str) -> str:
        """The path of `key` under the prefix (a key from a listing); one outside it is a ConfigError."""
        head = f"{self.prefix}/" if self.prefix else ""
        if not key.startswith(head) or key == head:
            raise ConfigError("key", f"{key!r} is not under {self}", "list only under the prefix")
        rel = key[len(head) :]
        check_relative(rel, "key")
        return rel


def check_relative(path: str, field: str) -> None:
    """A relative path of plain segments: no empty, '.' or '..' segment, no leading '/', no backslash or
    control character (a key that a file system view of the bucket would read as another place)."""
    bad = (
        not path
        or path.startswith("/")
        or "\\" in path
        or any(ord(c) < 0x20 or c == "\x7f" for c in path)
        or any(seg in ("", ".", "..") for seg in path.split("/"))
    )
    if bad:
        raise ConfigError(
            field,
            f"{path!r} escapes its prefix or is not a plain relative path",
            "use names of plain segments: no '..', '.', empty segment, leading '/', backslash or control character",
        )
