"""Where a case's time goes: cases judged into a run folder as `resilience matrix` does, with the runner's
steps timed from outside (their functions wrapped for the run, nothing in the package changes) and each
job cut into its ranks' operations by the case's own history.

Buckets (seconds summed over the cases):
- learn layout: the clean save a case with faults learns the backend's file layout from (cached per
  process, so only the first case of a (combination, topology, model) pays it);
- fork: forking a job's rank processes (Job.start, in the runner);
- start: the rest of a job's wall time not spent in its ranks' operations (gloo init, building the state,
  teardown);
- train, save, load: rank 0's operations, from its history events (train and continue: the time since
  its previous event; save, finalize and load: invoke to ok or fail);
- crash states: building the disks a power loss can leave, and the jobs that load each of them (their
  forks included);
- checkers: the evidence from the history and every checker;
- report: the case's timeline.html and its row in the run folder, and the run's reports at the end;
- other: the rest of run_case (scenario file, planning, merging histories, corruptions at rest)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator

BUCKETS = ("learn layout", "fork", "start", "train", "save", "load", "crash states", "checkers", "report", "other")


class Clocks:
    def __init__(self) -> None:
        self.seconds = dict.fromkeys(BUCKETS, 0.0)
        self.forks: dict[str, float] = {}  # a case job's log folder -> seconds its ranks took to fork

    def add(self, bucket: str, seconds: float) -> None:
        self.seconds[bucket] = self.seconds.get(bucket, 0.0) + seconds

    def wrap(self, owner, name: str, bucket: str, stack: contextlib.ExitStack) -> None:
        """Time every call of owner.name into `bucket` while the stack is open."""
        fn = getattr(owner, name)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(bucket, time.perf_counter() - t0)

        setattr(owner, name, timed)
        stack.callback(setattr, owner, name, fn)

    def wrap_fork(self, stack: contextlib.ExitStack) -> None:
        """Time Job.start of the case's own jobs (not the layout probe's: learn layout holds it) by job."""
        from resilience.launch import local

        fn = local.Job.start

        def timed(job):
            t0 = time.perf_counter()
            try:
                return fn(job)
            finally:
                if job.log_dir and os.path.basename(os.path.dirname(job.log_dir)) == "logs":
                    self.forks[job.log_dir] = time.perf_counter() - t0

        local.Job.start = timed  # type: ignore[method-assign]
        stack.callback(setattr, local.Job, "start", fn)


def job_costs(history: str, forks: dict[int, float] | None = None) -> dict[str, float]:
    """fork / start / train / save / load / crash states of every job of one case, from its history.jsonl
    and the seconds each job (by number) took to fork its ranks."""
    with open(history) as f:
        events = [json.loads(line) for line in f]
    out = dict.fromkeys(("fork", "start", "train", "save", "load", "crash states"), 0.0)
    forks = forks or {}
    jobs: dict[int, dict] = {}
    for e in events:
        if e["process"] == "runner" and e["f"] == "job":
            j = jobs.setdefault(e["value"].get("job", e["job"]), {"events": []})
            if e["type"] == "invoke":
                j["start"], j["crash"] = e["time"], bool(e["value"].get("crash_state"))
            else:
                j["end"] = e["time"]
        elif e["process"] == 0:
            jobs.setdefault(e["job"], {"events": []})["events"].append(e)
    for number, j in jobs.items():
        if "start" not in j or "end" not in j:
            continue
        wall = j["end"] - j["start"]
        if j["crash"]:
            out["crash states"] += wall
            continue
        fork = min(wall, forks.get(number, 0.0))
        out["fork"] += fork
        wall -= fork
        ops = 0.0
        last = j["start"]
        opened: dict[str, float] = {}
        for e in sorted(j["events"], key=lambda e: e["time"]):
            f, kind = e["f"], e["type"]
            if f in ("train", "continue") and kind == "ok":
                d = e["time"] - max(last, j["start"])
                out["train"] += d
                ops += d
            elif kind == "invoke":
                opened[f] = e["time"]
            elif f in opened and kind in ("ok", "fail", "info"):
                d = e["time"] - opened.pop(f)
                out["load" if f == "load" else "save"] += d
                ops += d
            last = e["time"]
        out["start"] += max(0.0, wall - ops)
    return out


@contextlib.contextmanager
def timed_runner(clocks: Clocks) -> Iterator[None]:
    """The runner's steps wrapped with clocks for the duration."""
    from resilience.report import folder as report_folder
    from resilience.runner import case_loop as case_loop_module, faultplan, run as run_module

    with contextlib.ExitStack() as stack:
        clocks.wrap(faultplan, "layout_for", "learn layout", stack)
        clocks.wrap(faultplan, "power_loss", "crash states", stack)
        clocks.wrap(run_module, "evidence", "checkers", stack)
        clocks.wrap(run_module, "run_checker", "checkers", stack)
        clocks.wrap(run_module, "judge_expect", "checkers", stack)
        clocks.wrap(case_loop_module, "_draw_timeline", "report", stack)
        clocks.wrap(report_folder.RunFolder, "append", "report", stack)
        clocks.wrap(report_folder.RunFolder, "finish", "report", stack)
        clocks.wrap_fork(stack)
        yield


def matrix_cases(combos, faults: list[str], transitions: list[str], seed: int = 0) -> list:
    """The matrix's cases for these columns (resilience.runner.matrix.cases)."""
    from resilience.runner.matrix import cases, parse_transitions

    return cases(combos, faults, parse_transitions(transitions or ["none"]), seed)


def breakdown(cases, backend: str = "reference") -> dict:
    """Judge `cases` (resilience.runner.matrix.Case) into a fresh run folder with clocks on; the seconds
    per bucket, the wall time, and the verdict of each case."""
    from resilience.report import RunFolder
    from resilience.runner.case_loop import CaseSpec, judge_cases

    clocks = Clocks()
    tmp = tempfile.mkdtemp(prefix="bench-cases-")
    try:
        folder = RunFolder.create(tmp, "bench", {"title": "benchmark", "cases": len(cases)})
        specs = [
            CaseSpec(
                c.scenario,
                c.combo,
                os.path.join(folder.path, "cases", f"{i:03d}"),
                backend,
                c.fault,
                c.transition,
                {"column": c.column},
            )
            for i, c in enumerate(cases)
        ]
        t0 = time.perf_counter()
        with timed_runner(clocks):
            rows = judge_cases(folder, specs)
            folder.finish(rows)
        wall = time.perf_counter() - t0
        for spec in specs:
            logs = os.path.join(spec.case_dir, "logs")
            forks = {
                int(name[3:]): seconds
                for path, seconds in clocks.forks.items()
                if os.path.dirname(path) == logs and (name := os.path.basename(path)).startswith("job")
            }
            for bucket, seconds in job_costs(os.path.join(spec.case_dir, "history.jsonl"), forks).items():
                clocks.add(bucket, seconds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = clocks.seconds
    seconds.pop("jobs", None)  # cut into start, train, save, load and crash states by the histories
    named = sum(v for k, v in seconds.items() if k != "other")
    seconds["other"] = max(0.0, wall - named)
    return {
        "cases": len(cases),
        "wall_s": wall,
        "seconds": seconds,
        "verdicts": [(r.combo, r.column, r.verdict.value) for r in rows],
    }
