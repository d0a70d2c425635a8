"""Corruption at rest aimed through a learned Layout: data damage lands in tensor payload, metadata and
tracker damage on the files this backend has, the reference's own kinds mapped to their equivalent or
refused as not applicable with the reason. Nothing here knows an implementation's file names."""

from __future__ import annotations

import fnmatch
import os
import random
import shutil
import struct

from ..errors import ConfigError
from .base import Fault, matches_path
from .damage_records import Damage, NotApplicable, NothingToDamage, flip_record, planted_record, record
from .file_damage import damage_metadata_file, damage_pointer_file, flip_byte as _flip, forge_escaping_path
from .hostile_pickle import DCP_METADATA, plant_among, plant_metadata, reference_manifest_body
from .kinds import (
    BitFlip,
    DeleteFile,
    EscapingManifestPath,
    ExtraFile,
    HostilePickle,
    LeftoverStaging,
    MetadataDamage,
    TrackerDamage,
    Truncate,
)
from .layout import Layout, LayoutFile

_LOCAL_HEADER, _CENTRAL, _END = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
_END64, _END64_LOCATOR = b"PK\x06\x06", b"PK\x06\x07"


# ---- where --------------------------------------------------------------------------------------------
def _newest(found: list, fault: Fault, what: str, root: str) -> tuple[int | None, list]:
    its = sorted({it for it, _, _ in found if it is not None})
    if not its:
        raise NothingToDamage("target", f"no {what} of any checkpoint under {root}")
    it = fault.target.iteration if fault.target.iteration is not None else its[-1]
    chosen = [x for x in found if x[0] == it]
    if not chosen:
        raise NothingToDamage("target.iteration", f"no {what} of iteration {it} under {root} (saved: {its})")
    return it, chosen


def _pick(
    root: str, fault: Fault, layout: Layout, role: str, rng: random.Random, *, with_bytes: bool = False
) -> tuple[int | None, str]:
    found = layout.found(root, None if fault.target.path else role, fault.target.rank)
    found = [x for x in found if matches_path(fault.target.path, x[1], os.path.relpath(x[1], root))]
    what = f"file matching {fault.target.path!r}" if fault.target.path else f"{role} file"
    if fault.target.rank is not None:
        what += f" of rank {fault.target.rank}"
    found = _read_by_a_load(found, what, root)
    it, chosen = _newest(found, fault, what, root)
    if with_bytes and any(_size(p) for _, p, _ in chosen):
        # a rank that holds only replicas writes an empty file (DCP's dedup): nothing in it to flip or cut
        chosen = [x for x in chosen if _size(x[1])]
    _, path, _ = chosen[rng.randrange(len(chosen))]
    return it, path


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_by_a_load(found: list, what: str, root: str) -> list:
    """The files among `found` a load reads (as learned by loading a clean save): damage elsewhere probes
    nothing. All of them when reads were not learned."""
    read = [x for x in found if x[2].read is not False]
    if found and not read:
        names = sorted({os.path.relpath(p, root) for _, p, _ in found})[:4]
        raise NotApplicable(
            "target",
            f"no load of this backend reads the {what} ({', '.join(names)}; learned by "
            "loading a clean save): damage there probes nothing",
        )
    return read


# ---- tensor payload -----------------------------------------------------------------------------------
def payload_ranges(path: str) -> list[tuple[int, int]]:
    """Byte ranges holding tensor storage: the data/ entries of every torch.save zip archive in the
    file (a torch file is one archive; a DCP .distcp holds one per tensor), read from each archive's
    central directory."""
    with open(path, "rb") as f:
        raw = f.read()
    out, pos = [], raw.find(_END)
    while pos >= 0:
        try:
            out += _archive_payload(raw, pos)
        except struct.error:
            pass
        pos = raw.find(_END, pos + 4)
    return sorted(set(out))


def _archive_payload(raw: bytes, end: int) -> list[tuple[int, int]]:
    count, cd_size, cd_offset = struct.unpack_from("<HII", raw, end + 10)
    cd_end = end
    if raw[end - 20 : end - 16] == _END64_LOCATOR and raw[end - 76 : end - 72] == _END64:
        cd_end = end - 76
        count, cd_size, cd_offset = struct.unpack_from("<QQQ", raw, cd_end + 32)
    start = cd_end - cd_size - cd_offset  # where this archive begins in the file
    out, p = [], cd_end - cd_size
    for _ in range(count):
        if raw[p : p + 4] != _CENTRAL:
            break
        (method,) = struct.unpack_from("<H", raw, p + 10)
        (size,) = struct.unpack_from("<I", raw, p + 20)
        n, m, k = struct.unpack_from("<HHH", raw, p + 28)
        (local,) = struct.unpack_from("<I", raw, p + 42)
        name = raw[p + 46 : p + 46 + n].decode("utf-8", "replace")
        p += 46 + n + m + k
        at = start + local
        if method != 0 or "/data/" not in name or not size or size == 0xFFFFFFFF or raw[at : at + 4] != _LOCAL_HEADER:
            continue
        ln, lm = struct.unpack_from("<HH", raw, at + 26)
        begin = at + 30 + ln + lm
        if begin + size <= len(raw):
            out.append((begin, begin + size))
    return out


def archive_spans(raw: bytes) -> list[tuple[int, int]]:
    """(start, end) of every torch.save zip archive in `raw`, found from each end-of-central-directory
    record (a DCP .distcp holds one archive per tensor, one after the other)."""
    out, pos = [], raw.find(_END)
    while pos >= 0:
        try:
            count, cd_size, cd_offset = struct.unpack_from("<HII", raw, pos + 10)
            cd_end = pos
            if raw[pos - 20 : pos - 16] == _END64_LOCATOR and raw[pos - 76 : pos - 72] == _END64:
                cd_end = pos - 76
                count, cd_size, cd_offset = struct.unpack_from("<QQQ", raw, cd_end + 32)
            (comment,) = struct.unpack_from("<H", raw, pos + 20)
            start = cd_end - cd_size - cd_offset
            if 0 <= start < pos and raw[start : start + 4] == _LOCAL_HEADER:
                out.append((start, pos + 22 + comment))
        except struct.error:
            pass
        pos = raw.find(_END, pos + 4)
    return out


def _loaded(path: str) -> list[bytes] | None:
    """Every tensor's bytes as torch.load(weights_only=True) returns them, archive by archive when the file
    holds several (torch.load of the whole file reads only one of them); None if no archive of the file
    loads (the stored values cannot be compared that way)."""
    import io

    import torch

    with open(path, "rb") as f:
        raw = f.read()
    spans = archive_spans(raw)
    docs, loaded = [], 0
    for a, b in spans if len(spans) > 1 else [(0, len(raw))]:
        try:
            docs.append(torch.load(io.BytesIO(raw[a:b]), weights_only=True, map_location="cpu"))
            loaded += 1
        except Exception:
            docs.append(None)  # an archive that does not load: its place in the list still compares
    if not loaded:
        return None
    out: list[bytes] = []

    def walk(x):
        if isinstance(x, torch.Tensor):
            out.append(x.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if x.numel() else b"")
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    for doc in docs:
        if doc is None:
            out.append(b"<no load>")
        else:
            walk(doc)
    return out


def bit_flip(root: str, fault: BitFlip, layout: Layout, rng: random.Random) -> Damage:
    it, path = _pick(root, fault, layout, "data", rng, with_bytes=True)
    size = os.path.getsize(path)
    if size == 0:
        raise NothingToDamage("target", f"{path} is empty: no bit to flip")
    bits = fault.bits if fault.bits is not None else (rng.randrange(8),)
    mask = 0
    for b in bits:
        mask |= 1 << b
    if fault.target.offset is not None:
        if fault.target.offset >= size:
            raise ConfigError("target.offset", f"{fault.target.offset} is past the end of {path} ({size} bytes)")
        old = _flip(path, fault.target.offset, mask)
        return flip_record(fault, root, path, fault.target.offset, bits, old, mask, detail="at the offset asked")
    ranges = payload_ranges(path)
    if not ranges:
        offset = rng.randrange(size)
        old = _flip(path, offset, mask)
        return flip_record(
            fault,
            root,
            path,
            offset,
            bits,
            old,
            mask,
            detail="no tensor payload recognised in this file: a random byte",
        )
    with open(path, "rb") as f:
        raw = f.read()
    before = _loaded(path)
    total = sum(b - a for a, b in ranges)
    loads = 0
    for _ in range(_DRAWS):
        k = rng.randrange(total)
        for a, b in ranges:
            if k < b - a:
                offset, start = a + k, a
                break
            k -= b - a
        if _in_zero_word(raw, offset, start):
            continue  # padding rows hold zeros and no load compares them: draw again
        old = _flip(path, offset, mask)
        after = _loaded(path) if before is not None else None
        if before is None or after != before:
            how = (
                "a stored tensor value changed (torch.load before and after), in a non-zero word"
                if before is not None
                else "inside a tensor's storage bytes, in a non-zero word"
            )
            return flip_record(fault, root, path, offset, bits, old, mask, detail=f"tensor payload: {how}")
        _flip(path, offset, mask)  # changed no loaded value: undo, draw again
        loads += 1
        if loads == _LOADS:
            break
    raise NotApplicable(
        "target",
        f"no bit flip drawn in {os.path.relpath(path, root)} changes a value "
        "torch.load returns (the bytes hold no loaded tensor data, or only zeros: padding no load compares)",
    )


# A flip is drawn again when it lands in a zero word (padding rows, such as Megatron's padded vocabulary,
# hold zeros and no load compares them) or changes no value torch.load returns.
_DRAWS, _LOADS = 64, 8
_WORD = 4


def _in_zero_word(raw: bytes, offset: int, start: int) -> bool:
    """Whether the byte at `offset` lies in an all-zero word (aligned from `start`, where its storage
    begins): an element of a padding row, which holds zero in every saved tensor."""
    lo = start + (offset - start) // _WORD * _WORD
    return not any(raw[lo : lo + _WORD])


def truncate(root: str, fault: Truncate, layout: Layout, rng: random.Random) -> Damage:
    it, path = _pick(root, fault, layout, "data", rng, with_bytes=True)
    old = os.path.getsize(path)
    if old == 0:
        raise NothingToDamage("target", f"{path} is empty: nothing to cut")
    if fault.length is not None:
        if fault.length > old:
            raise ConfigError(
                "length", f"{fault.length} is longer than {path} ({old} bytes)", "truncate cuts; use a smaller length"
            )
        new = fault.length
    else:
        ranges = payload_ranges(path)
        # cut inside tensor payload when there is some: the stored tensors lose bytes, not just a trailer
        new = rng.randrange(*ranges[rng.randrange(len(ranges))]) if ranges else rng.randrange(old)
    os.truncate(path, new)
    return record(fault, "truncate", root, path, old_size=old, new_size=new)


def delete_file(root: str, fault: DeleteFile, layout: Layout, rng: random.Random) -> Damage:
    it, path = _pick(root, fault, layout, "data", rng)
    old = os.path.getsize(path)
    os.unlink(path)
    return record(fault, "delete", root, path, old_size=old)


# ---- metadata and pointers ----------------------------------------------------------------------------
def metadata_damage(root: str, fault: MetadataDamage, layout: Layout, rng: random.Random) -> Damage:
    if not layout.has("metadata"):
        raise NotApplicable("kind", f"this backend writes no metadata file ({layout.describe()})")
    found = [
        x
        for x in layout.found(root, "metadata", fault.target.rank)
        if fault.name is None or fnmatch.fnmatchcase(os.path.basename(x[1]), fault.name)  # a learned name may hold '*'
    ]
    if fault.name is not None and not found:
        names = sorted({os.path.basename(f.template) for f in layout.of("metadata")})
        raise NotApplicable("name", f"this backend writes no {fault.name} (its metadata files: {', '.join(names)})")
    found = _read_by_a_load(found, f"metadata file {fault.name}" if fault.name else "metadata files", root)
    it, chosen = _newest(found, fault, "metadata file", root)
    _, path, _ = chosen[rng.randrange(len(chosen))]
    return damage_metadata_file(root, path, fault, rng)


def tracker_damage(root: str, fault: TrackerDamage, layout: Layout, rng: random.Random) -> Damage:
    pointers = layout.of("pointer", fault.target.rank)
    if not pointers:
        raise NotApplicable(
            "kind",
            f"this backend keeps no pointer to its newest checkpoint (no tracker such as "
            f"latest.txt; {layout.describe()}): tracker damage does not apply",
        )
    f = pointers[rng.randrange(len(pointers))]
    there = [p for _, p, g in layout.found(root, "pointer") if g == f]
    # a pointer whose name differs between runs: the one this run wrote; else where the template says
    path = there[0] if there else os.path.join(root, f.template.replace("{{", "{").replace("}}", "}"))
    return damage_pointer_file(root, path, fault, layout.iterations(root))


def escaping_path(root: str, fault: EscapingManifestPath, layout: Layout, rng: random.Random) -> Damage:
    found = [x for x in layout.found(root, "metadata", fault.target.rank) if _lists_files(x[1])]
    if not found:
        names = sorted({os.path.basename(f.template) for f in layout.of("metadata")}) or ["none"]
        raise NotApplicable(
            "kind",
            "this backend's metadata names no file list of the reference's manifest format to forge a path into"
            f" (its metadata files: {', '.join(names)})",
        )
    it, chosen = _newest(found, fault, "manifest with a file list", root)
    return forge_escaping_path(root, fault, os.path.dirname(chosen[0][1]))


def _lists_files(path: str) -> bool:
    """A manifest of the reference's format (another library's file of that name is never forged)."""
    return reference_manifest_body(path) is not None


def leftover_staging(root: str, fault: LeftoverStaging, layout: Layout, rng: random.Random) -> Damage:
    """What a save killed mid-write leaves: the next iteration's files, the last data file cut in half,
    no metadata and no pointer update: in the staging folder the backend writes into, or (a backend
    that writes in place) in the next iteration's own folder."""
    data = [f for f in layout.files if f.role == "data" and f.per_iteration]
    its = layout.iterations(root)
    if not data or not its:
        raise NothingToDamage("target", f"no checkpoint under {root} to leave a partial copy of")
    newest = its[-1]
    nxt = newest + 1
    copied = []
    newest_files = {f: p for it, p, f in layout.found(root, "data") if it == newest}  # names with '*' resolved
    for f in data:
        src = newest_files.get(f)
        if src is None:
            continue
        where = f.written_as if f.written_as and f.written_as != f.template else f.template
        rel = where.format(iteration=nxt).replace("*", rng.randbytes(4).hex())
        dst = os.path.join(root, rel)
        if os.path.exists(dst):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
        copied.append(dst)
    if not copied:
        raise NothingToDamage("target", f"the partial save of iteration {nxt} would overwrite existing files")
    os.truncate(copied[-1], os.path.getsize(copied[-1]) // 2)
    folder = os.path.commonpath([os.path.dirname(p) for p in copied])
    return record(
        fault,
        "create partial save",
        root,
        folder,
        detail=f"{len(copied)} data files of iteration {nxt}, last one cut in half, no metadata",
    )


def extra_file(root: str, fault: ExtraFile, layout: Layout, rng: random.Random) -> Damage:
    its = layout.iterations(root)
    if not its:
        raise NothingToDamage("target", f"no checkpoint under {root}")
    it = fault.target.iteration if fault.target.iteration is not None else its[-1]
    folder = layout.folder(it)
    if folder is None:
        raise NotApplicable("kind", "this backend's saves have no folder of their own to put a file into")
    path = os.path.join(root, folder, fault.name)
    if os.path.exists(path):
        raise ConfigError("name", f"{path} already exists", "choose another name")
    with open(path, "wb") as f:
        f.write(rng.randbytes(fault.length))
    return record(fault, "create", root, path, new_size=fault.length)


def hostile_pickle(root: str, fault: HostilePickle, layout: Layout, rng: random.Random) -> Damage:
    """The pickled metadata (DCP's .metadata) of the newest checkpoint, found through the layout; with
    none, one torch.save archive among the files a load of it reads (of the target rank, matching the
    target path)."""
    glob = fault.target.path
    found = [
        x
        for x in layout.found(root, None, fault.target.rank)
        if (glob is not None or x[2].role in ("data", "metadata"))
        and matches_path(glob, x[1], os.path.relpath(x[1], root))
    ]
    metadata = [x for x in found if os.path.basename(x[1]) == DCP_METADATA]
    if metadata:
        it, chosen = _newest(metadata, fault, f"{DCP_METADATA} file", root)
        return planted_record(root, fault, plant_metadata(root, chosen[0][1]))
    what = f"file matching {glob!r}" if glob else "data or metadata file"
    if fault.target.rank is not None:
        what += f" of rank {fault.target.rank}"
    if not found:
        raise NotApplicable("target", f"this backend keeps no {what} to hold a pickle ({layout.describe()})")
    it, chosen = _newest(_read_by_a_load(found, what, root), fault, what, root)
    where = f"iteration {it}" if it is not None else "the checkpoint"
    return planted_record(root, fault, plant_among(root, [p for _, p, _ in chosen], rng, where))


ACTIONS = {
    HostilePickle: hostile_pickle,
    Truncate: truncate,
    BitFlip: bit_flip,
    DeleteFile: delete_file,
    MetadataDamage: metadata_damage,
    TrackerDamage: tracker_damage,
    EscapingManifestPath: escaping_path,
    LeftoverStaging: leftover_staging,
    ExtraFile: extra_file,
}


def iteration_of(layout: Layout, root: str, path: str) -> int | None:
    """The iteration a damaged path belongs to, by the layout's templates (None: no iteration's)."""
    rel = os.path.relpath(path, root)
    for f in layout.files:
        if not f.per_iteration:
            continue
        parts = f.template.split("/")
        k = max(i for i, p in enumerate(parts) if "{iteration" in p)
        m = LayoutFile("/".join(parts[: k + 1]), f.role).pattern().match(rel)
        if m and (m.end() == len(rel) or rel[m.end()] == "/"):
            return int(m.group(1))
    return None


# NotApplicable: where the runner has always found it (faults.damage_records holds it)
__all__ = ["ACTIONS", "LayoutFile", "NotApplicable", "iteration_of", "payload_ranges"]
