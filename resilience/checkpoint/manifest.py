"""Our own metadata: a versioned JSON manifest with a digest over its body, and safe paths.

Reading a checkpoint follows storage.contained's rule: only regular files, only inside the
checkpoint folder (symlinks that leave it are refused). Every number read from a manifest is an
integer in range, so a hostile one is an IntegrityError naming the file, never a crash."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import xxhash

from .. import storage
from ..errors import IntegrityError
from ..state.topology import Topology
from ..storage.contained import check_folder, check_inside
from ..storage.held import Buffer, read_hashed
from ..vocab.combos import Combination
from ..vocab.folders import MANIFEST
from ..vocab.manifest_format import FORMAT_VERSION, body_digest, manifest_text
from ..vocab.versions import versions

CHUNK = 8 << 20
MAX_MANIFEST_BYTES = 256 << 20
MAX_ITERATION = 10**15
MAX_SIZE = 1 << 62


def bounded_int(value, limit: int, path: str, what: str) -> int:
    """`value` when it is an integer in 0..limit (a JSON int, not a float, bool or string)."""
    if type(value) is not int or not 0 <= value <= limit:
        raise IntegrityError(path, "manifest fields", f"{what} is {str(value)[:40]!r}, not an integer in 0..{limit}")
    return value


def safe_relpath(rel: str, where: str) -> str:
    """A path read from a checkpoint file: relative, no '..', no absolute, no backslash tricks."""
    norm = os.path.normpath(rel)
    if (
        not rel
        or os.path.isabs(rel)
        or norm.startswith("..")
        or "\\" in rel
        or "\x00" in rel
        or norm != rel.rstrip("/")
        and norm != rel
    ):
        raise IntegrityError(where, "path safety", f"path {rel!r} escapes the checkpoint folder")
    return norm


def file_digest(path: str) -> tuple[int, str]:
    """(size, xxh3-128) of a file, read through the seam."""
    h = xxhash.xxh3_128()
    size = 0
    with storage.current().open_read(path) as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            size += len(block)
            h.update(block)
    return size, h.hexdigest()


@dataclass
class Manifest:
    """What a committed checkpoint holds: combination, topology, model, iteration, every file."""

    combination: dict
    topology: dict
    model: dict
    iteration: int
    files: dict[str, dict] = field(default_factory=dict)  # relpath -> {"size", "xxh3_128"}
    extra: dict = field(default_factory=dict)
    writer: dict = field(default_factory=versions)
    created: float = field(default_factory=time.time)

    def body(self) -> dict:
        return {
            "combination": self.combination,
            "topology": self.topology,
            "model": self.model,
            "iteration": self.iteration,
            "files": dict(sorted(self.files.items())),
            "extra": self.extra,
            "writer": self.writer,
            "created": self.created,
        }

    def to_json(self) -> str:
        return manifest_text(self.body())

    def write(self, folder: str) -> None:
        """Write and fsync manifest.json into `folder` (a staging folder: not yet visible)."""
        fs = storage.current()
        with fs.open_write(os.path.join(folder, MANIFEST)) as f:
            storage.write_all(f, self.to_json().encode())

    @classmethod
    def read(cls, folder: str, root: str | None = None) -> Manifest:
        """The manifest of checkpoint folder `folder`, inside checkpoint root `root` (default: the
        folder holding `folder`). Any failure is an IntegrityError: an uncaught one on one rank hangs
        the others."""
        path = os.path.join(folder, MANIFEST)
        check_inside(folder, root if root is not None else os.path.dirname(os.path.abspath(folder)))
        fs = storage.current()
        if getattr(fs, "local", True):  # an object store has no symlink, FIFO or unreadable folder to refuse
            check_folder(folder)
        elif not fs.is_dir(folder):
            raise IntegrityError(folder, "checkpoint folder", "is gone: no object under it")
        if not (fs.exists(path) or os.path.islink(path)):  # a dangling symlink is reported as one below
            raise IntegrityError(path, "manifest present", "the folder has no manifest.json: an uncommitted save")
        check_inside(path, folder)
        try:
            with fs.open_read(path) as f:
                raw = f.read(MAX_MANIFEST_BYTES + 1)
        except OSError as e:
            if isinstance(e, IntegrityError):
                raise
            raise IntegrityError(path, "manifest readable", f"{type(e).__name__}: {e}") from None
        if len(raw) > MAX_MANIFEST_BYTES:
            raise IntegrityError(path, "manifest size", f"more than {MAX_MANIFEST_BYTES} bytes")
        try:
            doc = json.loads(raw.decode("utf-8"))
            body = doc["body"]
            version = doc["format_version"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as e:
            raise IntegrityError(path, "manifest parse", f"not a manifest ({type(e).__name__}: {e})") from None
        if type(version) is not int or version > FORMAT_VERSION:
            raise IntegrityError(
                path,
                "manifest version",
                f"format_version {str(version)[:40]!r} is newer than "
                f"{FORMAT_VERSION}; upgrade checkpoint-resilience to read it",
            )
        try:
            digest = body_digest(body)
        except (ValueError, TypeError, RecursionError) as e:
            raise IntegrityError(path, "manifest parse", f"{type(e).__name__}: {e}") from None
        if doc.get("digest") != digest:
            raise IntegrityError(path, "manifest checksum", "the manifest body does not match its digest")
        try:
            files = {
                safe_relpath(k, path): {
                    "size": bounded_int(v["size"], MAX_SIZE, path, f"the size of {k!r}"),
                    "xxh3_128": str(v["xxh3_128"]),
                }
                for k, v in body["files"].items()
            }
            iteration = bounded_int(body["iteration"], MAX_ITERATION, path, "the iteration")
            # readers build these on every rank; a bad one must fail here, as an IntegrityError, not there
            Topology.from_dict(body["topology"])
            Combination.from_dict(body["combination"])
            return cls(
                body["combination"],
                body["topology"],
                body["model"],
                iteration,
                files,
                body.get("extra", {}),
                body.get("writer", {}),
                body.get("created", 0.0),
            )
        except IntegrityError:
            raise
        except Exception as e:  # a hostile body: any failure to read it is this manifest's fault
            raise IntegrityError(path, "manifest fields", f"{type(e).__name__}: {e}") from None


def save_number(manifest: Manifest, path: str) -> int:
    """The number a LOCAL save recorded in its manifest, alike on every rank for one save; -1 for a
    manifest written before saves were numbered."""
    value = manifest.extra.get("save", -1) if isinstance(manifest.extra, dict) else -1
    if type(value) is int and value == -1:
        return -1
    return bounded_int(value, MAX_ITERATION, path, "the save number")


def verify_file(folder: str, rel: str, expected: dict, keep: bool = False) -> Buffer | None:
    """Size then checksum of one listed file; IntegrityError naming the file and the check. The file
    must be a regular file inside `folder` (storage.contained). With `keep`, the file is read into memory
    once, hashed piece by piece as it is read, and its bytes are returned for the load to use (one pass
    over the bytes instead of a hashing pass and a loading pass)."""
    path = os.path.join(folder, safe_relpath(rel, os.path.join(folder, MANIFEST)))
    fs = storage.current()
    if not (fs.exists(path) or os.path.islink(path)):
        raise IntegrityError(path, "file present", "listed in the manifest but missing")
    check_inside(path, folder)
    data = None
    try:
        size = fs.size(path)
        if size == expected["size"]:
            if keep:
                data, digest = read_hashed(path, size)
                size = len(data)
            else:
                _, digest = file_digest(path)
    except OSError as e:
        if isinstance(e, IntegrityError):
            raise
        raise IntegrityError(path, "readable", f"{type(e).__name__}: {e}") from None
    if size != expected["size"]:
        raise IntegrityError(path, "size", f"{size} bytes, manifest says {expected['size']}")
    if digest != expected["xxh3_128"]:
        raise IntegrityError(path, "checksum", f"xxh3-128 {digest}, manifest says {expected['xxh3_128']}")
    return data
