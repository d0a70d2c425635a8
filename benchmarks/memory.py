"""Peak resident memory of each rank during a save and a load, against the state it holds.

Linux keeps a process's peak resident set (VmHWM) and resets it on `echo 5 > /proc/self/clear_refs`, so a
peak is exact, whatever its duration, and costs nothing while measured. Elsewhere a thread samples the
resident set every 2 ms (psutil) and can miss a short peak.

Before each measurement the rank collects garbage and returns freed heap to the kernel (malloc_trim), so
what an earlier method freed is not counted as free memory for the next. Each figure is the peak minus the
resident set just before, on each rank: what that save or load needed on top of what the process held.
The resident set counts the pages of a mapped file too (a load that maps its files: clean page cache the
kernel can drop); a thread samples the anonymous part alone (RssAnon, every 5 ms) so the two are told apart.
As a ratio to the state: (state + that extra) / state, so 1.0 is a save that needs nothing but the state."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import re
import threading
from collections.abc import Callable

import psutil

FIXED_BYTES = 64 << 20  # a rank's I/O buffers and the interpreter's working memory, whatever the state's size
TARGET_SYNC = 1.2  # (state + a sync save's or load's extra memory - FIXED_BYTES) / state, at most
TARGET_ASYNC = 2.0  # the same for an async save (it keeps a staged copy of the state) and its load
_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _status_kib(field: str) -> int:
    with open(_STATUS) as fh:
        found = re.search(rf"^{field}:\s+(\d+) kB", fh.read(), re.M)
    if found is None:
        raise OSError(f"{_STATUS} has no {field}")
    return int(found.group(1))


def _has_clear_refs() -> bool:
    try:
        with open(_CLEAR_REFS, "w") as fh:
            fh.write("5")
        _status_kib("VmHWM")
        return True
    except OSError:
        return False


def trim() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class Peak:
    """`with Peak() as p: ...` then p.extra: the peak resident bytes above those held at entry."""

    exact = _has_clear_refs()
    way = "VmHWM reset through /proc/self/clear_refs" if exact else "psutil sampling every 2 ms"

    def __enter__(self) -> Peak:
        trim()
        self._proc = psutil.Process()
        self.before = self._proc.memory_info().rss
        self._high = self.before
        self._anon_before = self._anon_high = _anon()
        if self.exact:
            with open(_CLEAR_REFS, "w") as fh:
                fh.write("5")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002 if not self.exact else 0.005):
            if not self.exact:
                self._high = max(self._high, self._proc.memory_info().rss)
            self._anon_high = max(self._anon_high, _anon())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self.exact:
            self.peak = _status_kib("VmHWM") << 10
        else:
            self.peak = max(self._high, self._proc.memory_info().rss)
        self.extra = max(0, self.peak - self.before)
        self.anon_extra = max(0, max(self._anon_high, _anon()) - self._anon_before)


def _anon() -> int:
    try:
        return _status_kib("RssAnon") << 10
    except OSError:
        return 0


def measure(bench, folder_of: Callable[[str], str], remove: Callable[[int, str], None]) -> dict:
    """Every combination of `bench` (a benchmarks.checkpoint.RankBench) saved (async: save() and finalize())
    and loaded once, sync ones first; this rank's extra bytes for each. Untimed."""
    names = sorted(bench.backends, key=lambda n: bench.backends[n].combo.is_async)
    out = {}
    for name in names:
        backend, folder = bench.backends[name], folder_of(name)
        bench.state.iteration = 3000

        def save(backend=backend, folder=folder):
            backend.save(bench.state, folder)
            backend.finalize()

        with Peak() as s:
            save()
        with Peak() as lo:
            backend.load(bench.state, folder)
        out[name] = {
            "save": s.extra,
            "load": lo.extra,
            "save_anon": s.anon_extra,
            "load_anon": lo.anon_extra,
            "rss_before": s.before,
        }
        remove(bench.rank, folder)
    bench.clock.progress(f"peak memory of every combination measured ({Peak.way})")
    return out


def summarize(per_rank: list[dict], state_bytes: list[int], asyncs: set[str]) -> dict:
    """Per combination: each rank's save and load ratio (state + extra) / state, the worst rank's, and
    the target (sync 1.2x, async 2x, after FIXED_BYTES)."""
    out = {}
    for name in per_rank[0]:
        limit = TARGET_ASYNC if name in asyncs else TARGET_SYNC
        row: dict = {"limit": limit}
        for what in ("save", "load"):
            extras = [m[name][what] for m in per_rank]
            ratios = [(s + e) / s for s, e in zip(state_bytes, extras)]
            judged = max((s + max(0, e - FIXED_BYTES)) / s for s, e in zip(state_bytes, extras))
            anon = [m[name].get(f"{what}_anon", 0) for m in per_rank]
            row[what] = {
                "ratios": ratios,
                "extra_bytes": extras,
                "anon_extra_bytes": anon,
                "worst": max(ratios),
                "anon_worst": max((s + e) / s for s, e in zip(state_bytes, anon)),
                "judged": judged,
            }
        row["met"] = all(row[w]["judged"] <= limit for w in ("save", "load"))
        out[name] = row
    return out


def report(fig: dict, state_bytes: list[int]) -> None:
    print(
        f"{'peak memory, (state + extra) / state':<40}{'save worst':>11}{'load worst':>11}"
        f"{'save extra MiB per rank':>30}{'load extra MiB per rank':>30}{'anon only: save':>17}{'load':>7}"
    )
    for name, row in fig.items():
        s, lo = row["save"], row["load"]
        print(
            f"{name:<40}{s['worst']:>10.2f}x{lo['worst']:>10.2f}x"
            f"{' '.join(f'{e / (1 << 20):6.0f}' for e in s['extra_bytes']):>30}"
            f"{' '.join(f'{e / (1 << 20):6.0f}' for e in lo['extra_bytes']):>30}"
            f"{s['anon_worst']:>16.2f}x{lo['anon_worst']:>6.2f}x"
        )
    print(
        f"  state per rank {', '.join(f'{b / (1 << 20):.0f}' for b in state_bytes)} MiB; extra: the peak resident "
        f"set minus the one before ({Peak.way}), async: save() + finalize(); anon only: the anonymous "
        f"resident set sampled every 5 ms (a mapped file's clean pages left out)"
    )
    print()


def report_targets(fig: dict) -> None:
    for name, row in fig.items():
        print(
            f"target {name} peak memory <= {row['limit']:.1f}x the state + {FIXED_BYTES >> 20} MiB per rank: save "
            f"{row['save']['judged']:.2f}x, load {row['load']['judged']:.2f}x, "
            f"{'met' if row['met'] else 'NOT met'}"
        )
