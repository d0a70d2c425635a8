"""The hostile pickle: a `.metadata` that runs a command when a loader unpickles it.

The replacement unpickles, with plain pickle, to exactly the original metadata, after running
`os.system("echo ran >> MARKER")`: a loader that unpickles it loads normally, and only the marker
file shows that code from the checkpoint ran (one line per time it ran). MARKER is
`HOSTILE_PICKLE_RAN` in the checkpoint root, so a run can tell afterwards; the Damage record names
it. Loaders with a restricted unpickler refuse the first class it names (`_operator.getitem`)."""

from __future__ import annotations

import json
import operator
import os
import pickle
import shlex

import xxhash

from ..errors import ConfigError
from ..vocab.folders import MANIFEST
from ..vocab.manifest_format import manifest_text

DCP_METADATA = ".metadata"
MARKER = "HOSTILE_PICKLE_RAN"


class _Command:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


class _ThenValue:
    """Unpickles to `value`, after unpickling `first` (the command)."""

    def __init__(self, first, value):
        self.first, self.value = first, value

    def __reduce__(self):
        return operator.getitem, ((self.first, self.value), 1)


class _Unpickled:
    """Unpickles to what the pickle `data` holds: the original metadata, byte for byte as written."""

    def __init__(self, data: bytes):
        self.data = data

    def __reduce__(self):
        return pickle.loads, (self.data,)


def hostile_bytes(original: bytes, marker: str) -> bytes:
    """A pickle that appends a line to `marker` and then yields what `original` (DCP metadata) holds.
    The original is embedded, not unpickled here: nothing in the checkpoint runs while planting."""
    return pickle.dumps(_ThenValue(_Command(f"echo ran >> {shlex.quote(marker)}"), _Unpickled(original)))


def _rewrite_manifest(folder: str, rel: str, data: bytes) -> bool:
    """Give `rel` its new size and checksum in the folder's manifest, digest recomputed; False when
    the folder has no manifest (another implementation's checkpoint)."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        try:
            body = json.loads(f.read())["body"]
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError("target", f"{path} is not a manifest to rewrite: {e}") from None
    files = dict(body["files"])
    files[rel] = {"size": len(data), "xxh3_128": xxhash.xxh3_128_hexdigest(data)}
    with open(path, "wb") as f:
        f.write(manifest_text(dict(body, files=dict(sorted(files.items())))).encode())
    return True


def plant(root: str, folder: str) -> tuple[str, str, int, int, bool]:
    """Replace `folder`'s `.metadata`: (its path, the marker, old size, new size, manifest rewritten).
    NotApplicable (the case is N/A with the reason) when the folder holds no pickle."""
    from .layout_damage import NotApplicable

    path = os.path.join(folder, DCP_METADATA)
    if not os.path.isfile(path):
        raise NotApplicable(
            "target", f"{folder} holds no pickle ({DCP_METADATA}): this format has no pickled metadata to replace"
        )
    marker = os.path.join(root, MARKER)
    if os.path.lexists(marker):
        os.unlink(marker)  # the marker must say what the next load did, not an earlier one
    with open(path, "rb") as f:
        original = f.read()
    if not original.startswith(b"\x80"):  # pickle protocol 2 and later start with PROTO
        raise ConfigError("target", f"{path} is not a pickle to replace")
    data = hostile_bytes(original, marker)
    with open(path, "wb") as f:
        f.write(data)
    rewritten = _rewrite_manifest(folder, os.path.relpath(path, folder), data)
    return path, marker, len(original), len(data), rewritten
