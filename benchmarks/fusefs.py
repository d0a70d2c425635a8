"""What the FUSE way in costs: writing one large file through the mount against writing it to the bare folder.

One run opens a new file, writes SIZE bytes in CHUNK-sized os.write calls, fsyncs and closes it; the time
is from the open to the close (fsync included, so the bytes are on the backing disk either way). Three
ways, interleaved within each repeat so a change of machine load hits them alike:

- bare: the backing folder itself;
- seam+log: the in-process seam (resilience.storage through faults.inject with no records) with its
  operation log, which also keeps a copy of every written byte: what a seam case pays for power loss;
- mount: through resilience.fusefs mounted over it, no log (passthrough, pid->rank attribution, fault
  decisions with no records);
- mount+log: as mount, with the log folder beside it: fuse.jsonl and the seam's operation log, which
  keeps a copy of every written byte (for crash states), so the disk takes each byte twice.

Mounting and unmounting are not timed, nor is the sync(2) before each run: the bytes an earlier run left
for the disk to write back (the logs are never fsynced) would otherwise slow whichever run comes next.
Nothing is asserted: the figures are printed (median of the repeats, MiB/s, and bare/mount ratios), and
each target as `met` or `NOT met`: the ratio of medians, with the median of the run-by-run ratios and the
machine's load average beside it.

    python -m benchmarks fusefs [--size-mib 256] [--chunk-mib 1] [--repeats 5] [--folder DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time

from resilience.commands.common import positive_int
from resilience.fusefs import fuse_available, mounted

MIB = 1 << 20
WAYS = ("bare", "seam+log", "mount", "mount+log")
# way -> its median time / the bare folder's, at most
TARGETS = {"mount": 1.5, "mount+log": 1.8}


def write_file(path: str, size: int, chunk: int) -> float:
    """Seconds to write `size` bytes to a new file at `path` in `chunk`-sized writes, fsync and close."""
    block = os.urandom(chunk)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = size
        while left:
            view = memoryview(block)[: min(chunk, left)]
            while view:
                n = os.write(fd, view)
                view, left = view[n:], left - n
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def seam_write_file(path: str, size: int, chunk: int, oplog: str) -> float:
    """write_file through the storage seam with its operation log (open_write, write, fsync, close)."""
    from resilience.faults import inject
    from resilience.storage import current

    block = os.urandom(chunk)
    with inject([], rank=0, world=1, oplog_dir=oplog):
        t0 = time.perf_counter()
        with current().open_write(path, sync=False) as out:
            left = size
            while left:
                left -= out.write(memoryview(block)[: min(chunk, left)])
            out.fsync()
        return time.perf_counter() - t0


def _fs_type(folder: str) -> str:
    best, kind = "", "?"
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if (
                len(parts) > 2
                and (folder == parts[1] or folder.startswith(parts[1].rstrip("/") + "/"))
                and len(parts[1]) > len(best)
            ):
                best, kind = parts[1], parts[2]
    return kind


def measure(folder: str, size: int, chunk: int, repeats: int, loads: list[float]) -> dict[str, list[float]]:
    """Seconds of each way's runs; the 1-min load average after each repeat is appended to `loads`."""
    backing, mnt, log = (os.path.join(folder, d) for d in ("backing", "mnt", "log"))
    for d in (backing, mnt):
        os.makedirs(d, exist_ok=True)
    seconds: dict[str, list[float]] = {w: [] for w in WAYS}
    for _ in range(repeats):
        for way in WAYS:
            target = os.path.join(backing, "big.bin")
            os.sync()  # what the last run left for the disk is written before this one starts
            if way == "bare":
                seconds[way].append(write_file(target, size, chunk))
            elif way == "seam+log":
                shutil.rmtree(log, ignore_errors=True)
                seconds[way].append(seam_write_file(target, size, chunk, log))
            else:
                shutil.rmtree(log, ignore_errors=True)
                with mounted(backing, mnt, log=log if way == "mount+log" else None):
                    seconds[way].append(write_file(os.path.join(mnt, "big.bin"), size, chunk))
            os.unlink(target)
        loads.append(os.getloadavg()[0])
    shutil.rmtree(log, ignore_errors=True)
    return seconds


def targets(fig: dict, seconds: dict[str, list[float]]) -> dict:
    """Each target of TARGETS: the way's median over the bare folder's (value), the median of the run-by-run
    ratios (paired), the limit and whether the value is within it."""
    out = {}
    for way, limit in TARGETS.items():
        value = fig[way]["median_s"] / fig["bare"]["median_s"]
        paired = statistics.median(w / b for w, b in zip(seconds[way], seconds["bare"]))
        out[way] = {"value": value, "paired": paired, "limit": limit, "met": value <= limit}
    return out


def _load_range(loads: list[float]) -> str:
    low, high = min(loads), max(loads)
    return f"load average {low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"load average {low:.1f}-{high:.1f}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks fusefs", description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=positive_int, default=256, metavar="N", help="size of the file (MiB)")
    p.add_argument("--chunk-mib", type=positive_int, default=1, metavar="N", help="size of one os.write (MiB)")
    # 5: a median of 3 on a shared 2-core machine moved a ratio by 0.3 from one run to the next
    p.add_argument("--repeats", type=positive_int, default=5, metavar="N", help="runs of each way")
    p.add_argument("--folder", metavar="DIR", help="where the backing folder goes (default: a temp folder)")
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    return p.parse_args(argv)


def run(size_mib: int, chunk_mib: int, repeats: int, folder: str | None = None) -> dict | None:
    """Measure and print the four ways; the figures, or None when FUSE cannot mount here (said why)."""
    size, chunk = size_mib * MIB, chunk_mib * MIB
    ok, why = fuse_available()
    if not ok:
        print(f"fusefs throughput: not measured, {why}")
        return None
    with tempfile.TemporaryDirectory(prefix="bench-fusefs-", dir=folder) as where:
        kind = _fs_type(where)
        print(
            f"fusefs throughput: {size_mib} MiB in {chunk_mib} MiB writes + fsync, {repeats} "
            f"repeats, backing folder on {kind} ({where})"
        )
        loads: list[float] = []
        seconds = measure(where, size, chunk, repeats, loads)
    fig = {}
    for way in WAYS:
        med = statistics.median(seconds[way])
        fig[way] = {"median_s": med, "mib_per_s": size_mib / med, "runs_s": seconds[way]}
        print(
            f"  {way:<10} median {med:.3f} s  {size_mib / med:8.1f} MiB/s  "
            f"runs {' '.join(f'{s:.3f}' for s in seconds[way])}"
        )
    ratios = {w: fig[w]["median_s"] / fig["bare"]["median_s"] for w in WAYS[1:]}
    print("  " + ", ".join(f"{w} takes {r:.2f}x the bare folder's time" for w, r in ratios.items()))
    to_seam = fig["mount+log"]["median_s"] / fig["seam+log"]["median_s"]
    print(f"  mount+log takes {to_seam:.2f}x the time of seam+log (both keep every byte for crash states)")
    goals = targets(fig, seconds)
    for way, t in goals.items():
        print(
            f"target {way} <= {t['limit']:g}x the bare folder's time ({chunk_mib} MiB writes + fsync): "
            f"{t['value']:.2f}x (run by run {t['paired']:.2f}x, {_load_range(loads)}), "
            f"{'met' if t['met'] else 'NOT met'}"
        )
    return {
        "size_mib": size_mib,
        "chunk_mib": chunk_mib,
        "repeats": repeats,
        "backing_fs": kind,
        "ways": fig,
        "ratio_to_bare": ratios,
        "mount_log_to_seam_log": to_seam,
        "targets": goals,
        "load_averages": loads,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    fig = run(args.size_mib, args.chunk_mib, args.repeats, args.folder)
    if fig is not None and args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "benchmark": "fusefs",
                    "version": 1,
                    **fig,
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "load_average": os.getloadavg(),
                },
                f,
                indent=2,
            )
            f.write("\n")
        print(f"figures written to {args.json}")
    return 0
