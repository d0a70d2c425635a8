"""What the machine itself can do for a checkpoint: the same bytes as plain sequential files.

Each rank writes as many bytes as it writes for a checkpoint (its replica-0 tensor bytes) to a file of its
own, in 8 MiB `os.write` calls, and fsyncs it; as many writers as ranks, started together. The file is then
evicted from the page cache (posix_fadvise DONTNEED: its pages are clean after the fsync, so the kernel
drops them) and read back in 8 MiB `readinto` calls. Nothing is hashed, parsed or copied into tensors: what
is left is the disk and the kernel, the limit every save and load is printed against.

Checkpoint loads are evicted the same way before they are timed (`drop_cache_tree`), so a load and the raw
read both start from the disk rather than one of them from memory."""

from __future__ import annotations

import os
from collections.abc import Callable

CHUNK = 8 << 20  # large enough that a call's overhead is noise, small enough to stay in the cpu caches
CACHE_WAY = "posix_fadvise(DONTNEED) of every file" if hasattr(os, "posix_fadvise") else "none (page cache warm)"


def write_plain(path: str, nbytes: int, chunk: bytes) -> None:
    """`nbytes` of `chunk` repeated, sequentially, then fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view, left = memoryview(chunk), nbytes
        while left:
            left -= os.write(fd, view[: min(left, len(view))])
        os.fsync(fd)
    finally:
        os.close(fd)


def read_plain(path: str) -> int:
    """Every byte of `path` into one reused buffer; the bytes read."""
    buf, total = bytearray(CHUNK), 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    return total


def drop_cache(path: str) -> None:
    """Evict the clean pages of `path` (a no-op where posix_fadvise is missing: the read is then warm)."""
    if not hasattr(os, "posix_fadvise"):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_cache_tree(folder: str) -> None:
    """Evict every file under `folder`: a load timed next reads from the disk, as the raw read does."""
    for where, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(where, name)
            if os.path.isfile(path) and not os.path.islink(path):
                drop_cache(path)


class RawBaseline:
    """One rank's part of the raw measurement: `measure(clock, folder)` times the write (`raw write`) and
    the cold read (`raw read`) of `nbytes` as collective steps of `clock` (benchmarks.checkpoint.Clock)."""

    def __init__(self, rank: int, nbytes: int) -> None:
        self.rank, self.nbytes = rank, nbytes
        # not zeros and not one repeated byte, so no layer below can shortcut or compress the write
        self.chunk = bytes((i * 2654435761 >> 13) & 0xFF for i in range(1 << 16)) * (CHUNK >> 16)

    def measure(self, clock, folder: str, remove: Callable[[int, str], None]) -> None:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"rank{self.rank}.bin")
        clock.run("raw write", lambda: write_plain(path, self.nbytes, self.chunk))
        drop_cache(path)
        clock.run("raw read", lambda: read_plain(path))
        gib = clock.world * self.nbytes / (1 << 30)
        w, r = clock.last("raw write"), clock.last("raw read")
        clock.progress(f"{'plain files (raw)':<27} write {w:6.3f} s ({gib / w:.2f} GiB/s), cold read {r:6.3f} s")
        remove(self.rank, folder)


def fractions(f, names: list[tuple[str, str, str]]) -> dict:
    """Each method's save and load as a fraction of the raw bandwidth (raw time / its time, medians; the
    same bytes), and the run-by-run median of that ratio. `f` is a benchmarks.checkpoint.Figures."""
    raw_w, raw_r = f.wall("raw write"), f.wall("raw read")
    out = {}
    for method, save, load in names:
        row: dict = {}
        if save in f.runs:
            row["save"] = raw_w / f.wall(save)
            row["save_paired"] = _median_ratio(f.walls("raw write"), f.walls(save))
        if load in f.runs:
            row["load"] = raw_r / f.wall(load)
            row["load_paired"] = _median_ratio(f.walls("raw read"), f.walls(load))
        out[method] = row
    return out


def _median_ratio(a: list[float], b: list[float]) -> float:
    ratios = sorted(x / y for x, y in zip(a, b))
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
