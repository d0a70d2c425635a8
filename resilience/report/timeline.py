"""timeline.html in a case folder: what every rank did over time, as Jepsen's timeline.html does for a
history, drawn as static SVG (no script) with the same events listed as text below it.

Lanes: the runner (jobs, damage at rest), one per rank (train, save, finalize, load, ... from
history.jsonl, each an invoke-to-completion bar), and one per writer thread or process of a rank when the
case logged its file operations: the seam's operation log (`oplog/jobN/ops.rank<R>.jsonl`, kept for
power-loss states) or the fault-injecting file system's log (`fuse/jobN/fuse.jsonl`, with the process id).
Consecutive writes or reads of one file are one bar. Fault firings (faults.jsonl) and kills are marked.

The file-operation logs carry the machine's monotonic clock, the history the wall clock: they are put on
one axis by the difference of the two clocks when the timeline is written, which is right as long as it
is written on the machine and boot that ran the case (case_row writes it as the case ends, from the history
run_case read: resilience.history is its one reader, and a case's history.jsonl is read once)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..history import HISTORY_FILE, Event, case_history
from .links import TIMELINE
from .timeline_requests import add_requests

RUNNER = "runner"
IO_OPS = (
    "create",
    "open",
    "write",
    "read",
    "fsync",
    "fsync_dir",
    "rename",
    "exchange",
    "mkdir",
    "unlink",
    "rmtree",
    "truncate",
    "link",
    "symlink",
    "sigkill",
    "sigstop",
)
COALESCED = ("write", "read")  # consecutive ones on one file in one lane are one bar
MAX_IO = 50_000  # file operations read per case; past that the timeline says it stopped
MAX_LISTED = 3000  # rows of the event list under the picture
KILL_ACTIONS = ("sigkill", "kill", "sigstop", "power_loss")


@dataclass
class Bar:
    lane: str
    start: float
    end: float
    kind: str  # the operation: save, load, write, fsync, ...
    label: str
    outcome: str = "ok"  # ok, fail, unknown (no completion: killed, or the job ended first)
    detail: str = ""
    count: int = 1  # operations folded into the bar (writes to one file)


@dataclass
class Mark:
    lane: str
    at: float
    kind: str  # fault, kill, damage
    label: str


@dataclass
class Timeline:
    lanes: list[str] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    jobs: list[Bar] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lane(self, name: str) -> str:
        if name not in self.lanes:
            self.lanes.append(name)
        return name

    @property
    def span(self) -> tuple[float, float]:
        times = [t for b in self.bars + self.jobs for t in (b.start, b.end)] + [m.at for m in self.marks]
        return (min(times), max(times)) if times else (0.0, 0.0)


def write_timeline(
    case_dir: str, *, clock_offset: float | None = None, history: list[Event] | None = None
) -> str | None:
    """Write timeline.html into `case_dir` from its history and logs; its path, or None when the case folder
    holds no history. `clock_offset`: wall clock minus monotonic clock (default: now); `history`: the case's
    events already read (default: read from the folder's history.jsonl, as when a run is drawn again)."""
    if history is None and not os.path.isfile(os.path.join(case_dir, HISTORY_FILE)):
        return None
    if clock_offset is None:
        clock_offset = time.time() - time.monotonic()
    from .html import render

    path = os.path.join(case_dir, TIMELINE)
    try:
        tl = read_case(case_dir, clock_offset, history)
        page = render("timeline.html.j2", title=f"timeline: {os.path.basename(case_dir)}", error="", **draw(tl))
    except Exception as e:  # a page that says why, never a broken case: the timeline only shows evidence
        page = render(
            "timeline.html.j2",
            title=f"timeline: {os.path.basename(case_dir)}",
            error=f"the timeline could not be drawn: {type(e).__name__}: {e}",
            **draw(Timeline()),
        )
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, path)
    return path


def read_case(case_dir: str, clock_offset: float, history: list[Event] | None = None) -> Timeline:
    """The timeline of one case folder; `history` its events if already read (default: read them here)."""
    tl = Timeline()
    tl.lane(RUNNER)
    if history is None:
        history = case_history(case_dir)
    faults = list(_jsonl(os.path.join(case_dir, "faults.jsonl")))
    _from_history(tl, history, with_faults=not faults)
    for f in faults:
        _fault_mark(tl, f, float(f.get("time", 0.0)))
    _from_io_logs(tl, case_dir, clock_offset)
    add_requests(tl, case_dir, Bar, Mark)  # an object store's, through the fault proxy
    _order_lanes(tl)
    return tl


def _from_history(tl: Timeline, events: list[Event], *, with_faults: bool) -> None:
    open_ops: dict[tuple, list[Event]] = {}
    last_end: dict[tuple, float] = {}  # (job, rank) -> when its previous operation ended
    job_start: dict[int, tuple[float, dict]] = {}
    job_end: dict[int, float] = {}
    for e in sorted(events, key=lambda e: float(e.time)):
        t, f, kind, value, proc = float(e.time), str(e.f), e.type, e.value, e.process
        if proc == RUNNER:
            if f == "job":
                job = int(value.get("job", 0))
                if kind == "invoke":
                    job_start[job] = (t, value)
                else:
                    job_end[job] = t
                    _end_job(tl, job, t, job_start.pop(job, (t, {})), value)
            elif f == "fault":
                if with_faults:
                    _fault_mark(tl, value, t)
            elif f not in ("case", "layout"):
                tl.marks.append(Mark(RUNNER, t, "damage", f"{f}: {_summary(value)}"))
            continue
        lane = tl.lane(f"rank {proc}")
        job = int(e.job)
        key = (job, proc, f)
        if kind == "invoke":
            open_ops.setdefault(key, []).append(e)
            continue
        started = open_ops.get(key)
        begin = float(started.pop(0).time) if started else last_end.get((job, proc), job_start.get(job, (t,))[0])
        outcome = {"ok": "ok", "fail": "fail"}.get(str(kind), "unknown")
        tl.bars.append(Bar(lane, begin, t, f, _op_label(f, value), outcome, _summary(value)))
        last_end[(job, proc)] = t
    for (job, proc, f), pending in open_ops.items():  # never completed: the rank died or the job ended first
        for e in pending:
            end = job_end.get(job, float(e.time))
            tl.bars.append(
                Bar(
                    f"rank {proc}",
                    float(e.time),
                    max(end, float(e.time)),
                    f,
                    _op_label(f, e.value),
                    "unknown",
                    "no completion recorded",
                )
            )


def _end_job(tl: Timeline, job: int, t: float, start: tuple[float, dict], value: dict) -> None:
    begin, invoked = start
    what = " ".join(str(x) for x in (invoked.get("kind"), invoked.get("crash_state"), invoked.get("topology")) if x)
    outcome = "ok" if not value.get("signals") and not value.get("timed_out") else "unknown"
    tl.jobs.append(Bar(RUNNER, begin, t, "job", f"job {job} {what}".strip(), outcome, _summary(value)))
    for rank, sig in (value.get("signals") or {}).items():
        tl.marks.append(Mark(tl.lane(f"rank {rank}"), t, "kill", f"rank {rank} ended by signal {sig}"))
    if value.get("timed_out"):
        tl.marks.append(Mark(RUNNER, t, "kill", f"job {job} timed out"))


def _fault_mark(tl: Timeline, f: dict, t: float) -> None:
    rank = f.get("rank")
    lane = tl.lane(f"rank {rank}") if isinstance(rank, int) else RUNNER
    action = str(f.get("action", ""))
    kind = "kill" if action in KILL_ACTIONS else "fault"
    text = f.get("text") or (f.get("fault") or {}).get("kind") or f.get("kind") or "fault"
    tl.marks.append(Mark(lane, t, kind, f"{action or 'fired'}: {text}"))


def write_job_timeline(case_dir: str, runs: list[dict], *, clock_offset: float | None = None) -> str:
    """timeline.html of a `resilience job` case: each run's file operations per rank, thread and process
    (its mount's log, `run-N/fs/fuse.jsonl`), the runner's lane with each run and its whole-job kill, and
    the faults' firings marked. `runs`: each run's index, folder, how it ended, killed_at (monotonic ns),
    firings."""
    from ..faults.fuse_log import read_log
    from .html import render

    if clock_offset is None:
        clock_offset = time.time() - time.monotonic()
    tl = Timeline()
    tl.lane(RUNNER)
    read: set[str] = set()  # the runs of one job that torchrun restarted share one log
    try:
        for run in runs:
            fs = os.path.realpath(os.path.join(str(run.get("folder", "")), "fs"))
            recs = read_log(fs) if fs not in read else []
            read.add(fs)
            pids: dict[object, set] = {}
            for r in recs:
                pids.setdefault(r.get("rank"), set()).add(r.get("pid"))
            several = any(len(p) > 1 for p in pids.values())
            times = [float(r.get("t", 0)) / 1e9 + clock_offset for r in recs if r.get("t")]
            _from_io_logs(tl, ((r, several) for r in recs), clock_offset)
            if times:
                label = f"run {run.get('index')}: {run.get('ended', '')}"
                tl.jobs.append(Bar(RUNNER, min(times), max(times), "job", label))
            if run.get("killed_at"):
                tl.marks.append(
                    Mark(RUNNER, int(run["killed_at"]) / 1e9 + clock_offset, "kill", f"whole job: {run.get('killed')}")
                )
            for f in run.get("firings") or ():
                if isinstance(f, dict) and isinstance(f.get("time"), (int, float)):
                    _fault_mark(tl, f, float(f["time"]))
        _order_lanes(tl)
        page = render("timeline.html.j2", title=f"timeline: {os.path.basename(case_dir)}", error="", **draw(tl))
    except Exception as e:  # a page that says why, never a broken case: the timeline only shows evidence
        page = render(
            "timeline.html.j2",
            title=f"timeline: {os.path.basename(case_dir)}",
            error=f"the timeline could not be drawn: {type(e).__name__}: {e}",
            **draw(Timeline()),
        )
    path = os.path.join(case_dir, TIMELINE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(path + ".tmp", path)
    return path


def _from_io_logs(tl: Timeline, source, offset: float) -> None:
    """The file operations of `source` (a case folder, or (record, name its process) pairs) as bars."""
    ops: list[tuple[float, str, str, dict]] = []
    records = _io_records(source) if isinstance(source, str) else source
    for rec, pid_lanes in records:
        if len(ops) >= MAX_IO:
            tl.notes.append(f"file operations past the first {MAX_IO} are not drawn")
            break
        op = str(rec.get("op"))
        if op not in IO_OPS:
            continue
        rank = rec.get("rank")
        who = f"rank {rank}" if isinstance(rank, int) and rank >= 0 else "outside the ranks"
        thread = str(rec.get("thread") or "main")
        lane = f"{who} · {thread}" + (f" · pid {rec.get('pid')}" if pid_lanes and rec.get("pid") is not None else "")
        ops.append((float(rec.get("t", 0)) / 1e9 + offset, tl.lane(lane), op, rec))
    ops.sort(key=lambda o: o[0])
    open_run: dict[str, Bar] = {}
    for t, lane, op, rec in ops:
        name = os.path.basename(str(rec.get("path", "")))
        failed = "errno" in rec
        if op in COALESCED and not failed:
            run = open_run.get(lane)
            if run is not None and run.kind == op and run.detail == rec.get("path"):
                run.end, run.count = t, run.count + 1
                run.label = f"{op} {name} x{run.count}"
                continue
            open_run[lane] = bar = Bar(lane, t, t, op, f"{op} {name}", "ok", str(rec.get("path", "")))
            tl.bars.append(bar)
            continue
        open_run.pop(lane, None)
        if op in ("sigkill", "sigstop"):
            tl.marks.append(Mark(lane, t, "kill", f"{op}: {rec.get('fault', '')}"))
            continue
        where = f"{name} -> {os.path.basename(str(rec['dst']))}" if rec.get("dst") else name
        detail = str(rec.get("path", "")) + (f" -> {rec['dst']}" if rec.get("dst") else "")
        if failed:
            detail += f" (error {rec['errno']}{': ' + str(rec['fault']) if rec.get('fault') else ''})"
        tl.bars.append(Bar(lane, t, t, op, f"{op} {where}", "fail" if failed else "ok", detail))


def _io_records(case_dir: str) -> Iterator[tuple[dict, bool]]:
    """(record, whether to name its process) of every logged file operation: the file system's log of each
    job that ran under it, and the seam's operation log of each job that kept one (cancelled ops dropped)."""
    from ..faults.fuse_log import read_log
    from ..faults.oplog import read_ops

    for kind in ("fuse", "oplog"):
        root = os.path.join(case_dir, kind)
        if not os.path.isdir(root):
            continue
        for job_dir in sorted(os.listdir(root)):
            folder = os.path.join(root, job_dir)
            if kind == "oplog":
                yield from ((op.to_dict(), False) for op in read_ops(folder))
                continue
            recs = read_log(folder)
            pids: dict[object, set] = {}
            for r in recs:
                pids.setdefault(r.get("rank"), set()).add(r.get("pid"))
            several = any(len(p) > 1 for p in pids.values())  # a rank with child processes: name each
            yield from ((r, several) for r in recs)


def _order_lanes(tl: Timeline) -> None:
    """The runner first, then each rank followed by its threads and processes, ranks in number order."""

    def key(name: str):
        if name == RUNNER:
            return (0, 0, "")
        head, _, rest = name.partition(" · ")
        number = head.split()[-1]
        return (1 if head.startswith("rank") else 2, int(number) if number.isdigit() else 0, rest)

    tl.lanes.sort(key=key)


def _op_label(f: str, value: dict) -> str:
    it = value.get("iteration")
    return f"{f} it {it}" if it is not None else f


def _summary(value: dict, limit: int = 300) -> str:
    text = ", ".join(f"{k}={v}" for k, v in value.items() if k not in ("fault", "ops", "warnings"))
    return text if len(text) <= limit else text[:limit] + " ..."


def _jsonl(path: str) -> Iterator[dict]:
    """The records of a JSON-lines file other than the history (the fault firings)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line torn by a kill
                if isinstance(rec, dict):
                    yield rec
    except FileNotFoundError:
        return


# --- drawing ---------------------------------------------------------------------------------------------

LABEL_W, PLOT_W, LANE_H, AXIS_H = 200, 1100, 24, 40
COLOURS = {
    "save": "#1565c0",
    "finalize": "#6a1b9a",
    "recover": "#00897b",
    "load": "#2e7d32",
    "train": "#9e9e9e",
    "continue": "#9e9e9e",
    "stage": "#64b5f6",
    "write": "#42a5f5",
    "read": "#81c784",
    "fsync": "#ef6c00",
    "fsync_dir": "#e65100",
    "rename": "#8e24aa",
    "exchange": "#8e24aa",
    "create": "#90a4ae",
    "open": "#b0bec5",
    "mkdir": "#78909c",
    "unlink": "#5d4037",
    "rmtree": "#5d4037",
    "job": "#eceff1",
}


def draw(tl: Timeline) -> dict:
    """Geometry for templates/timeline.html.j2: lanes, bars, marks, job bands, axis ticks, the event list."""
    t0, t1 = tl.span
    scale = PLOT_W / max(t1 - t0, 1e-3)
    x = lambda t: LABEL_W + (t - t0) * scale  # noqa: E731
    rows = _pack(tl.bars)
    lane_rows = {name: 1 + max([rows[id(b)] for b in tl.bars if b.lane == name], default=0) for name in tl.lanes}
    lane_y, y = {}, AXIS_H
    for name in tl.lanes:
        lane_y[name], y = y, y + lane_rows[name] * LANE_H
    height = y + 10
    bars = []
    for b in tl.bars:
        x0, w = x(b.start), max((b.end - b.start) * scale, 2.0)
        bars.append(
            {
                "x": x0,
                "y": lane_y[b.lane] + rows[id(b)] * LANE_H + 3,
                "w": w,
                "h": LANE_H - 6,
                "fill": COLOURS.get(b.kind, "#607d8b"),
                "outcome": b.outcome,
                "label": b.label if w > 7 * len(b.label) else "",
                "title": f"{b.label} ({b.outcome}, {b.start - t0:.3f}-{b.end - t0:.3f} s) {b.detail}",
            }
        )
    marks = [
        {
            "x": x(m.at),
            "y": lane_y[m.lane],
            "h": LANE_H * lane_rows[m.lane],
            "kind": m.kind,
            "title": f"{m.label} (at {m.at - t0:.3f} s)",
        }
        for m in tl.marks
    ]
    jobs = [
        {
            "x": x(j.start),
            "w": max((j.end - j.start) * scale, 1.0),
            "title": j.label,
            "odd": i % 2,
            "label": _fit(j.label, (j.end - j.start) * scale),
        }
        for i, j in enumerate(sorted(tl.jobs, key=lambda j: j.start))
    ]
    events = sorted(
        [(b.start - t0, b.lane, b.label, b.outcome, f"{b.end - b.start:.3f} s", b.detail) for b in tl.bars + tl.jobs]
        + [(m.at - t0, m.lane, m.label, m.kind, "", "") for m in tl.marks]
    )
    return {
        "width": LABEL_W + PLOT_W + 20,
        "height": height,
        "label_w": LABEL_W,
        "lanes": [{"name": n, "y": lane_y[n], "h": lane_rows[n] * LANE_H} for n in tl.lanes],
        "bars": bars,
        "marks": marks,
        "jobs": jobs,
        "ticks": _ticks(t1 - t0, scale),
        "seconds": t1 - t0,
        "events": events[:MAX_LISTED],
        "more_events": max(0, len(events) - MAX_LISTED),
        "notes": tl.notes,
        "colours": COLOURS,
    }


def _fit(label: str, width: float) -> str:
    """As much of a job's label as its band holds: all of it, its first two words ("job 3"), or nothing."""
    if width > 6 * len(label) + 4:
        return label
    short = " ".join(label.split()[:2])
    return short if width > 6 * len(short) + 4 else ""


def _pack(bars: list[Bar]) -> dict[int, int]:
    """The row of each bar inside its lane: overlapping operations of one rank (an async save and its
    finalize) stacked, instants (file operations) on the first row."""
    rows: dict[int, int] = {}
    ends: dict[str, list[float]] = {}
    for b in sorted(bars, key=lambda b: (b.start, -b.end)):
        if b.end <= b.start:
            rows[id(b)] = 0
            continue
        lane = ends.setdefault(b.lane, [])
        row = next((i for i, end in enumerate(lane) if end <= b.start), len(lane))
        if row == len(lane):
            lane.append(b.end)
        else:
            lane[row] = b.end
        rows[id(b)] = row
    return rows


def _ticks(span: float, scale: float) -> list[dict]:
    step = next((s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300) if s * scale >= 80), 600)
    n = int(span / step) + 1
    return [{"x": LABEL_W + i * step * scale, "text": f"{i * step:g} s"} for i in range(n + 1) if i * step <= span]
