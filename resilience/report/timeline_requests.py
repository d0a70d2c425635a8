"""An object store's requests on a case's timeline: the fault proxy's log of each job (`CASE/s3/jobN.jsonl`,
objectstore.journal), one bar per request in its rank's lane (`rank R · s3`), from when the proxy got it to
when it ended, failed where the client did not get a 2xx answer (an error, a reset, a lost answer, a kill).
Times are the proxy's wall clock, as the history's."""

from __future__ import annotations

import glob
import os

MAX_REQUESTS = 20_000  # requests drawn per case; past that the timeline says it stopped


def _requests(case_dir: str):
    from ..objectstore.journal import read_requests

    for path in sorted(glob.glob(os.path.join(case_dir, "s3", "job*.jsonl"))):  # runner.io_route.PROXY_LOGS
        yield from read_requests(path)


def add_requests(tl, case_dir: str, bar, mark) -> None:
    """The case's requests as bars of `tl` (report.timeline.Timeline; `bar`, `mark`: its Bar and Mark)."""
    for n, r in enumerate(_requests(case_dir)):
        if n >= MAX_REQUESTS:
            tl.notes.append(f"requests past the first {MAX_REQUESTS} are not drawn")
            return
        rank = r.get("rank")
        lane = tl.lane(f"rank {rank} · s3" if isinstance(rank, int) else "outside the ranks · s3")
        status, op, key = r.get("status"), str(r.get("op")), str(r.get("key") or "")
        ok = isinstance(status, int) and 200 <= status < 300
        faults = ", ".join(r.get("faults") or [])
        detail = f"{r.get('method')} {key}: client got {status}, server {r.get('server_status')}"
        detail += f" (faults: {faults})" if faults else ""
        start, end = float(r.get("start") or 0.0), float(r.get("end") or 0.0)
        tl.bars.append(bar(lane, start, end, op, f"{op} {os.path.basename(key)}", "ok" if ok else "fail", detail))
        if faults:
            tl.marks.append(mark(lane, start, "fault", f"{faults}: {op} {key}"))


__all__ = ["add_requests"]
