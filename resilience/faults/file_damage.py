"""Damage to one file the aiming already chose, done alike whichever way it was found (by the
vocabulary's names, faults.corruption, or through a learned layout, faults.layout_damage): a flipped
byte, damaged metadata, a forged manifest path, a damaged pointer to the newest checkpoint."""

from __future__ import annotations

import json
import os
import random
import re

import xxhash

from ..errors import ConfigError
from ..vocab.folders import MANIFEST
from ..vocab.manifest_format import manifest_text
from .damage_records import Damage, NothingToDamage, record
from .kinds import EscapingManifestPath, MetadataDamage, TrackerDamage

_NUMBER = re.compile(r"\d+")


def flip_byte(path: str, offset: int, mask: int) -> int:
    """XOR the byte at `offset` with `mask` in place; the byte it held."""
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([old ^ mask]))
    return old


def damage_metadata_file(root: str, path: str, fault: MetadataDamage, rng: random.Random) -> Damage:
    """Delete, garble (the middle third replaced by seeded noise), truncate to half or empty one metadata file."""
    old = os.path.getsize(path)
    if fault.how == "delete":
        os.unlink(path)
        return record(fault, "delete", root, path, old_size=old)
    if fault.how == "garble":
        lo, hi = old // 3, max(old // 3 + 1, 2 * old // 3)
        noise = rng.randbytes(hi - lo)
        with open(path, "r+b") as f:
            f.seek(lo)
            f.write(noise)
        return record(
            fault,
            "garble",
            root,
            path,
            offset=lo,
            old_size=old,
            new_size=max(old, hi),
            detail=f"bytes {lo}..{hi} replaced by seeded noise",
        )
    new = old // 2 if fault.how == "truncate" else 0
    os.truncate(path, new)
    return record(fault, fault.how, root, path, old_size=old, new_size=new)


def forge_escaping_path(root: str, fault: EscapingManifestPath, folder: str) -> Damage:
    """The manifest of `folder` with a file list naming a path outside the folder, rewritten so its digest
    still matches."""
    path = os.path.join(folder, MANIFEST)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        body = json.loads(raw)["body"]
    except (ValueError, KeyError) as e:
        raise ConfigError("target", f"{path} is not a manifest to rewrite: {e}") from None
    files = dict(body["files"])
    files[fault.escape] = {"size": 0, "xxh3_128": xxhash.xxh3_128_hexdigest(b"")}
    data = manifest_text(dict(body, files=dict(sorted(files.items())))).encode()
    with open(path, "wb") as f:
        f.write(data)
    return record(
        fault,
        "rewrite manifest",
        root,
        path,
        old_size=len(raw),
        new_size=len(data),
        detail=f"file list now names {fault.escape!r}; digest recomputed",
    )


_POINTER_TEXTS = {"empty": "", "non_numeric": "not-a-number", "release": "release"}  # what those damages write


def damage_pointer_file(root: str, path: str, fault: TrackerDamage, iterations: list[int]) -> Damage:
    """Delete, empty, garble or renumber (stale: the iteration before the newest; future: one never saved) the
    file that points at the newest checkpoint; a number in it keeps its width (`iter_0000003` -> `iter_0000002`)."""
    old = None
    if os.path.exists(path):
        with open(path, "rb") as f:
            old = f.read().decode("utf-8", "replace")
    newest = iterations[-1] if iterations else 0
    if fault.how == "delete":
        if old is None:
            raise NothingToDamage("how", f"{path} does not exist: nothing to delete")
        os.unlink(path)
        return record(fault, "delete", root, path, old=old)
    if fault.how in _POINTER_TEXTS:
        text = _POINTER_TEXTS[fault.how]
    else:
        value = (
            (iterations[-2] if len(iterations) > 1 else max(newest - 1, 0)) if fault.how == "stale" else newest + 1000
        )
        text = _renumber(old or str(newest), newest, value)
    with open(path, "w") as f:
        f.write(text)
    return record(fault, fault.how, root, path, old=old, new=text)


def _renumber(text: str, old: int, new: int) -> str:
    """`text` with the number naming `old` replaced by `new` in the same width."""

    def sub(m):
        tok = m.group(0)
        return (str(new).zfill(len(tok)) if tok.startswith("0") else str(new)) if int(tok) == old else tok

    out = _NUMBER.sub(sub, text)
    return out if out != text else str(new)
