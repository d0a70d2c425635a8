"""Damage at rest between two runs of a job: one file of its newest checkpoint truncated, a bit of it
flipped, or the file deleted, or its tracker emptied, in the case's folder while nothing is mounted.

A bit flip that matters: the highest exponent bit (bit 6 of the top byte) of a stored value. In a
torch.save archive the value is taken in the middle of its largest tensor storage, at a byte 8-aligned
from the storage's start plus 7, the top byte of a little-endian element of 2, 4 or 8 bytes alike; in any
other file, in the middle of the file at the same place of an 8-byte word. A value hit so becomes about
2^±64 times itself or more: a job that trains on it cannot hide it in its curve. The file operations and
the records of what they did are faults/'s (file_damage, damage_records)."""

from __future__ import annotations

import glob
import os

from ..faults.base import Fault
from ..faults.damage_records import Damage, flip_record, record
from ..faults.file_damage import damage_pointer_file, flip_byte
from ..faults.kinds import BitFlip, DeleteFile, TrackerDamage, Truncate
from ..faults.layout_damage import payload_ranges

EXPONENT_MASK = 0x40


def exponent_offset(path: str) -> tuple[int, str]:
    """The offset of a top byte of a stored value in the middle of `path`, and where it was found."""
    size = os.path.getsize(path)
    ranges = payload_ranges(path)
    if ranges:
        a, b = max(ranges, key=lambda r: (r[1] - r[0], -r[0]))
        word = max(0, (b - a) // 2 // 8 * 8)
        if a + word + 7 < b:
            return a + word + 7, "the middle of the largest tensor storage of the archive"
    word = size // 2 // 8 * 8
    return min(word + 7, size - 1), "the middle of the file (no tensor storage recognised)"


def apply(fault: Fault, root: str, rel: str, steps: list[int]) -> Damage | None:
    """Carry out one damage at rest on `root`/`rel`; None when the file is not there (the fault did not fire).
    `steps`: the steps of the checkpoints on disk, oldest first (a tracker's damage reads them)."""
    path = _on_disk(root, rel)
    if isinstance(fault, TrackerDamage):
        return damage_pointer_file(root, path, fault, steps) if os.path.exists(path) else None
    if not os.path.isfile(path):
        return None
    size = os.path.getsize(path)
    if isinstance(fault, Truncate):
        os.truncate(path, size // 2)
        return record(fault, "truncate", root, path, old_size=size, new_size=size // 2)
    if isinstance(fault, DeleteFile):
        os.unlink(path)
        return record(fault, "delete", root, path, old_size=size)
    if isinstance(fault, BitFlip):
        if size == 0:
            return None
        offset, where = exponent_offset(path)
        old = flip_byte(path, offset, EXPONENT_MASK)
        return flip_record(fault, root, path, offset, (6,), old, EXPONENT_MASK, detail=f"exponent bit, in {where}")
    raise TypeError(f"{fault.kind} is not a damage at rest of resilience job")


def _on_disk(root: str, rel: str) -> str:
    """`root`/`rel`; where the learned name holds a '*' (a part that differs between runs: a pid, a random tag,
    a time), the file of that name this run wrote (the last in name order when several match)."""
    if "*" not in rel:
        return os.path.join(root, rel)
    found = sorted(glob.glob(os.path.join(glob.escape(root), rel)))
    return found[-1] if found else os.path.join(root, rel)


__all__ = ["apply", "exponent_offset"]
