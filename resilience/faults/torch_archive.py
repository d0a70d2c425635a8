"""torch.save's zip archive, read and written back with one record's bytes replaced.

torch.save writes a zip of stored (uncompressed) records under one folder name, `<prefix>/data.pkl`
(the pickle) first, then the tensor storages and a few small records, each record's data aligned
(64 bytes by default) by padding in an "FB" extra field of its local header; torch 2.x writes a data
descriptor after each record and zip64 end records. `replace_record` rewrites such an archive with one
record's bytes changed and keeps everything else as it was: every other record's bytes, the names and
their order, each record's alignment, the descriptors and the end records (offsets updated).

Nothing here unpickles or imports torch: the archive is only bytes."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

_LOCAL, _CENTRAL, _END = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
_END64, _LOCATOR, _DESCRIPTOR = b"PK\x06\x06", b"PK\x06\x07", b"PK\x07\x08"
_LOCAL_FMT = struct.Struct("<4sHHHHHIIIHH")  # 30 bytes
_CENTRAL_FMT = struct.Struct("<4sHHHHHHIIIHHHHHII")  # 46 bytes
_PAD_FIELD = b"FB"  # torch's alignment padding, an extra field of the local header
_HAS_DESCRIPTOR = 0x08  # general purpose flag bit 3: crc and sizes follow the data
_ZIP64 = 0xFFFFFFFF
PICKLE = "data.pkl"
DEFAULT_ALIGNMENT = 64  # torch's kFieldAlignment; an archive's `.storage_alignment` record may say otherwise


@dataclass(frozen=True)
class Record:
    name: str
    local: int  # offset of its local header
    begin: int  # where its data begins
    size: int
    end: int  # where the next record (or the central directory) begins: data and descriptor end here
    central: int  # offset of its central directory entry
    central_len: int
    flags: int


@dataclass(frozen=True)
class Archive:
    records: tuple[Record, ...]  # in the order they are stored
    central: tuple[int, int]  # (offset, size) of the central directory
    end64: int | None  # offset of the zip64 end record, when there is one
    end: int  # offset of the end-of-central-directory record

    @property
    def prefix(self) -> str:
        return self.records[0].name.split("/", 1)[0]

    def record(self, name: str) -> Record:
        return next(r for r in self.records if r.name == name)

    @property
    def pickle_name(self) -> str:
        return f"{self.prefix}/{PICKLE}"


def read(raw: bytes) -> Archive | str:
    """The archive `raw` holds, or why it is not one torch.save writes (stored records under one
    folder, `<folder>/data.pkl` among them, the whole file one archive, no record over 4 GiB)."""
    if raw[:4] != _LOCAL:
        return "does not begin with a zip record"
    end = raw.rfind(_END, max(0, len(raw) - 22 - 0xFFFF))
    if end < 0 or len(raw) < end + 22:
        return "has no end of a zip central directory"
    count, cd_size, cd_offset, comment = struct.unpack_from("<HIIH", raw, end + 10)
    if end + 22 + comment != len(raw):
        return "has bytes after its zip archive"
    end64 = None
    if raw[end - 20 : end - 16] == _LOCATOR:
        (end64,) = struct.unpack_from("<Q", raw, end - 12)
        if raw[end64 : end64 + 4] != _END64:
            return "has a broken zip64 end record"
        count, cd_size, cd_offset = struct.unpack_from("<QQQ", raw, end64 + 32)
    if cd_offset + cd_size != (end64 if end64 is not None else end):
        return "is not one zip archive from its first byte"
    records = []
    at = cd_offset
    for _ in range(count):
        if raw[at : at + 4] != _CENTRAL:
            return "has a broken zip central directory"
        f = _CENTRAL_FMT.unpack_from(raw, at)
        flags, method, csize, usize, n, m, k, local = f[3], f[4], f[8], f[9], f[10], f[11], f[12], f[16]
        name = raw[at + 46 : at + 46 + n].decode("utf-8", "replace")
        if _ZIP64 in (csize, usize, local):
            return f"has a record over 4 GiB ({name}): zip64 records are not rewritten"
        if method != 0 or flags & 1 or csize != usize:
            return f"has a compressed or encrypted record ({name}): torch.save stores every record"
        if raw[local : local + 4] != _LOCAL:
            return f"has no local header where its directory says ({name})"
        ln, lm = struct.unpack_from("<HH", raw, local + 26)
        if raw[local + 30 : local + 30 + ln] != raw[at + 46 : at + 46 + n]:
            return f"names {name} differently in its directory and its local header"
        if _fields(raw[local + 30 + ln : local + 30 + ln + lm]) is None:
            return f"has a broken extra field in the local header of {name}"
        records.append((local, name, local + 30 + ln + lm, usize, at, 46 + n + m + k, flags))
        at += 46 + n + m + k
    if not records or at != cd_offset + cd_size:
        return "has a broken zip central directory"
    records.sort()
    out = []
    for i, (local, name, begin, size, central, central_len, flags) in enumerate(records):
        nxt = records[i + 1][0] if i + 1 < len(records) else cd_offset
        tail = nxt - (begin + size)
        if tail < 0 or tail not in ((12, 16, 20, 24) if flags & _HAS_DESCRIPTOR else (0,)):
            return f"has bytes between its records ({name})"
        out.append(Record(name, local, begin, size, nxt, central, central_len, flags))
    folders = {r.name.split("/", 1)[0] for r in out}
    archive = Archive(tuple(out), (cd_offset, cd_size), end64, end)
    if len(folders) != 1 or "/" not in out[0].name or archive.pickle_name not in {r.name for r in out}:
        return f"is a zip without a {PICKLE} under one folder: not an archive torch.save writes"
    return archive


def data(raw: bytes, record: Record) -> bytes:
    return raw[record.begin : record.begin + record.size]


def alignment(raw: bytes, archive: Archive) -> int:
    """The alignment of record data the archive declares (`.storage_alignment`), else torch's default."""
    name = f"{archive.prefix}/.storage_alignment"
    if any(r.name == name for r in archive.records):
        text = data(raw, archive.record(name))
        if text.isdigit() and 0 < int(text) <= 0x8000:
            return int(text)
    return DEFAULT_ALIGNMENT


def replace_record(raw: bytes, archive: Archive, name: str, new: bytes) -> bytes:
    """`raw` with record `name`'s data replaced by `new`: its crc and sizes rewritten, every other
    record byte-identical, each record's data at the same offset modulo the alignment as before (the
    padding of its "FB" extra field resized, as torch pads), offsets in the directory updated."""
    align = alignment(raw, archive)
    out = bytearray()
    moved: dict[int, int] = {}  # old local header offset -> new
    crc = zlib.crc32(new) & 0xFFFFFFFF
    for r in archive.records:
        moved[r.local] = len(out)
        body = new if r.name == name else data(raw, r)
        header = bytearray(raw[r.local : r.local + 30])
        (ln,) = struct.unpack_from("<H", header, 26)
        name_bytes = raw[r.local + 30 : r.local + 30 + ln]
        fields = _fields(raw[r.local + 30 + ln : r.begin]) or []
        start = len(out) + 30 + ln + sum(4 + len(v) for k, v in fields if k != _PAD_FIELD) + 4
        pad = (r.begin - start) % align  # the data lands where it did, modulo the alignment
        if not any(k == _PAD_FIELD for k, _ in fields):
            fields.append((_PAD_FIELD, b""))
        extra = b"".join(k + struct.pack("<H", len(v)) + v for k, v in _padded(fields, pad))
        struct.pack_into("<H", header, 28, len(extra))
        tail = raw[r.begin + r.size : r.end]
        if r.name == name:
            if r.flags & _HAS_DESCRIPTOR:
                tail = _descriptor(tail, crc, len(new))
            else:
                struct.pack_into("<III", header, 14, crc, len(new), len(new))
        out += header + name_bytes + extra + body + tail
    cd_offset = len(out)
    for r in sorted(archive.records, key=lambda r: r.central):
        entry = bytearray(raw[r.central : r.central + r.central_len])
        struct.pack_into("<I", entry, 42, moved[r.local])
        if r.name == name:
            struct.pack_into("<III", entry, 16, crc, len(new), len(new))
        out += entry
    cd_size = len(out) - cd_offset
    if archive.end64 is not None:
        end64 = len(out)
        (size,) = struct.unpack_from("<Q", raw, archive.end64 + 4)
        record = bytearray(raw[archive.end64 : archive.end64 + 12 + size])
        struct.pack_into("<QQ", record, 40, cd_size, cd_offset)
        locator = bytearray(raw[archive.end - 20 : archive.end])
        struct.pack_into("<Q", locator, 8, end64)
        out += record + locator
    end = bytearray(raw[archive.end :])
    old_size, old_offset = struct.unpack_from("<II", end, 12)
    struct.pack_into(
        "<II",
        end,
        12,
        cd_size if old_size != _ZIP64 else _ZIP64,
        cd_offset if old_offset != _ZIP64 else _ZIP64,
    )
    out += end
    return bytes(out)


def _fields(extra: bytes) -> list[tuple[bytes, bytes]] | None:
    """The (id, data) fields of a zip extra field, None when they do not fill it exactly."""
    out, at = [], 0
    while at < len(extra):
        if at + 4 > len(extra):
            return None
        (size,) = struct.unpack_from("<H", extra, at + 2)
        if at + 4 + size > len(extra):
            return None
        out.append((extra[at : at + 2], extra[at + 4 : at + 4 + size]))
        at += 4 + size
    return out


def _padded(fields: list[tuple[bytes, bytes]], pad: int) -> list[tuple[bytes, bytes]]:
    return [(k, b"Z" * pad if k == _PAD_FIELD else v) for k, v in fields]


def _descriptor(old: bytes, crc: int, size: int) -> bytes:
    """The data descriptor after a record, in the form it had (signature or not, 4- or 8-byte sizes)."""
    signed = old[:4] == _DESCRIPTOR
    wide = len(old) - (4 if signed else 0) == 20
    sizes = struct.pack("<QQ", size, size) if wide else struct.pack("<II", size, size)
    return (_DESCRIPTOR if signed else b"") + struct.pack("<I", crc) + sizes
