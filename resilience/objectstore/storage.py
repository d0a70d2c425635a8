"""The storage seam's interface (resilience.storage.base.FileSystem) over an S3 bucket, for code that writes
paths: a path under `root` is the key of its relative path under the location's prefix.

What an object store is, and what this keeps visible rather than hides:
- an object appears whole when its PUT (or a multipart upload's complete) returns, or not at all; a write
  stream buffers and uploads on close (in parts of `part_bytes` past one part), so nothing is durable before
  close, and `fsync` promises nothing more than close does;
- there is no rename: `rename` copies every object and then deletes the source, which a crash can leave
  half done (`atomic_rename` is False: a commit protocol must not rely on it), and `exchange` is refused;
- there are no folders: `mkdir` and `fsync_dir` do nothing, a folder exists while a key is under it, and
  listing decides what a loader sees."""

from __future__ import annotations

import errno
import io
import os
import tempfile
from typing import IO, BinaryIO

from ..storage.base import WriteStreamBase
from ..storage.local import LocalWriteStream
from .url import S3Location

PART_BYTES = 8 << 20  # a multipart upload's part size (S3's minimum is 5 MiB but for the last part)


def _missing(e) -> bool:
    # an error that never got an answer (a reset, a lost answer) has no response, or a None one
    error = (getattr(e, "response", None) or {}).get("Error") or {}
    return str(error.get("Code")) in ("404", "NoSuchKey", "NotFound")


class S3WriteStream(WriteStreamBase):
    """An object being written: staged in a local temporary file (storage.local's stream, which hashes what is
    written, xxh3-128, and keeps its size), uploaded on close with a PUT or, past one part, a multipart upload
    (aborted when a part fails)."""

    def __init__(self, fs: S3FileSystem, path: str, key: str):
        self.path, self.key, self._fs = path, key, fs
        if fs.staging is None:
            fd, self._staged = tempfile.mkstemp(prefix="resilience-s3-")
            os.close(fd)
        else:  # named after its key: a watcher of the writer's open files sees which object it is writing
            self._staged = os.path.join(fs.staging, fs.location.relative(key))
            os.makedirs(os.path.dirname(self._staged), exist_ok=True)
        self._local = LocalWriteStream(self._staged, sync=False)  # nothing to make durable on this disk
        self.size = 0
        self.digest: str | None = None
        self.closed = False

    def write(self, data) -> int:
        return self._local.write(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._local.seek(offset, whence)

    def tell(self) -> int:
        return self._local.tell()

    def flush(self) -> None:
        """Nothing reaches the store before close."""

    def fsync(self) -> None:
        """Nothing is durable before close uploads the object: no promise to keep here."""

    def fileno(self) -> int:
        raise io.UnsupportedOperation(f"{self.path}: an object being uploaded has no file descriptor")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._local.close()
            self.size, self.digest = self._local.size, self._local.digest
            with open(self._staged, "rb") as body:
                self._fs.upload(self.key, body, self.size)
        finally:
            os.unlink(self._staged)


class S3FileSystem:
    """Paths under `root` as objects under `location`, through a boto3 `client` (objectstore.client)."""

    atomic_rename = False
    local = False  # no symlinks, FIFOs or modes: the local file system's checks do not apply (storage.contained)

    def __init__(
        self,
        client,
        location: S3Location,
        root: str,
        part_bytes: int = PART_BYTES,
        staging: str | None = None,
        fsspec_options: dict | None = None,
    ):
        self.client, self.location = client, location
        self.root = os.path.normpath(root)
        self.part_bytes = part_bytes
        # where write streams stage objects before upload, under their relative paths (None: temporary files);
        # one writer's own folder, as two writers of one key must not share a staged file
        self.staging = staging
        # what fsspec (s3fs) needs to reach the same bucket: for backends that write to it themselves
        self.fsspec_options = dict(fsspec_options or {})

    # ---- paths -----------------------------------------------------------------------------------
    def key(self, path: str) -> str:
        """The key of `path`; one outside `root` is an OSError naming it."""
        rel = os.path.relpath(os.path.normpath(str(path)), self.root)
        if rel == "." or rel.startswith(".."):
            if rel == ".":
                return self.location.prefix
            raise OSError(errno.EXDEV, f"{path} is not under the object store's root {self.root}", str(path))
        return self.location.key(rel)

    def object_url(self, path: str) -> str:
        """`path` as an s3:// URL (fsspec's way to name it)."""
        return f"s3://{self.location.bucket}/{self.key(path)}".rstrip("/")

    def _folder(self, path: str) -> str:
        key = self.key(path)
        return f"{key}/" if key else ""

    def _keys_under(self, path: str) -> list[str]:
        keys = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.location.bucket, Prefix=self._folder(path)
        ):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys

    # ---- objects ---------------------------------------------------------------------------------
    def upload(self, key: str, body: IO[bytes], size: int) -> None:
        bucket = self.location.bucket
        if size <= self.part_bytes:
            self.client.put_object(Bucket=bucket, Key=key, Body=body.read())
            return
        upload = self.client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        try:
            parts = []
            for number in range(1, (size + self.part_bytes - 1) // self.part_bytes + 1):
                etag = self.client.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body.read(self.part_bytes)
                )["ETag"]
                parts.append({"ETag": etag, "PartNumber": number})
            self.client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            try:  # a failed upload leaves no parts behind when the store still answers
                self.client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
            except Exception:
                pass
            raise

    def open_write(self, path: str, *, sync: bool = True) -> S3WriteStream:
        return S3WriteStream(self, str(path), self.key(path))

    def open_read(self, path: str) -> BinaryIO:
        try:
            body = self.client.get_object(Bucket=self.location.bucket, Key=self.key(path))["Body"]
        except Exception as e:
            if _missing(e):
                raise FileNotFoundError(errno.ENOENT, "no such object", str(path)) from None
            raise
        with body:
            return io.BytesIO(body.read())

    def size(self, path: str) -> int:
        try:
            return int(self.client.head_object(Bucket=self.location.bucket, Key=self.key(path))["ContentLength"])
        except Exception as e:
            if _missing(e):
                raise FileNotFoundError(errno.ENOENT, "no such object", str(path)) from None
            raise

    def unlink(self, path: str) -> None:
        self.size(path)  # FileNotFoundError for a missing object, as a file system says (S3 deletes it silently)
        self.client.delete_object(Bucket=self.location.bucket, Key=self.key(path))

    # ---- what stands in for folders and renames --------------------------------------------------
    def rename(self, src: str, dst: str) -> None:
        """Copy, then delete: an object, or every object of a folder. Not atomic (atomic_rename)."""
        bucket = self.location.bucket
        if self.is_file(src):
            pairs = [(self.key(src), self.key(dst))]
        else:
            head, target = self._folder(src), self._folder(dst)
            pairs = [(k, target + k[len(head) :]) for k in self._keys_under(src)]
            if not pairs:
                raise FileNotFoundError(errno.ENOENT, "no such object or folder", str(src))
        for old, new in pairs:
            self.client.copy_object(Bucket=bucket, Key=new, CopySource={"Bucket": bucket, "Key": old})
        for old, _ in pairs:
            self.client.delete_object(Bucket=bucket, Key=old)

    def copy(self, src: str, dst: str) -> None:
        """One object copied on the server: `dst` appears whole when the copy returns."""
        bucket = self.location.bucket
        try:
            self.client.copy_object(
                Bucket=bucket, Key=self.key(dst), CopySource={"Bucket": bucket, "Key": self.key(src)}
            )
        except Exception as e:
            if _missing(e):
                raise FileNotFoundError(errno.ENOENT, "no such object", str(src)) from None
            raise

    def files_under(self, path: str) -> list[str]:
        """The relative path of every object under folder `path`, sorted."""
        head = self._folder(path)
        return sorted(k[len(head) :] for k in self._keys_under(path))

    def exchange(self, a: str, b: str) -> None:
        raise OSError(errno.ENOTSUP, "an object store cannot exchange two names atomically", str(a))

    def mkdir(self, path: str) -> None:
        """No folders on an object store: one exists while a key is under it."""

    def fsync_dir(self, path: str) -> None:
        """Nothing to make durable: an object is durable when its upload returned."""

    def rmtree(self, path: str) -> None:
        for key in self._keys_under(path):
            self.client.delete_object(Bucket=self.location.bucket, Key=key)

    def listdir(self, path: str) -> list[str]:
        head, names = self._folder(path), set()
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.location.bucket, Prefix=head, Delimiter="/"
        ):
            names |= {p["Prefix"][len(head) :].rstrip("/") for p in page.get("CommonPrefixes", [])}
            names |= {o["Key"][len(head) :] for o in page.get("Contents", [])}
        return sorted(n for n in names if n)

    def is_file(self, path: str) -> bool:
        try:
            self.size(path)
            return True
        except FileNotFoundError:
            return False

    def is_dir(self, path: str) -> bool:
        if not self._folder(path):
            return True  # the location itself
        page = self.client.list_objects_v2(Bucket=self.location.bucket, Prefix=self._folder(path), MaxKeys=1)
        return bool(page.get("Contents"))

    def exists(self, path: str) -> bool:
        return self.is_file(path) or self.is_dir(path)
