"""History -> evidence: the one rule, for `resilience run` and the cluster verdicts alike.

As Jepsen records operations: every save is an invoke and, on each rank, an ok, fail or info, tied
together by a save id that is unique in the case (histories written without one get `job.n`, the n-th
save invoked on that rank in that job: every rank invokes the same saves in the same order). A save
is acknowledged only once it returned ok on every rank of its job (for an async save: once finalize
returned); one that returned on some ranks only is indeterminate. Two saves of one iteration are two
records, so a later save never overwrites the acknowledgement of an earlier one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..checkers import Evidence, LoadRecord, SaveRecord
from ..history import FAILED, INFO, INVOKE, OK, Event
from ..state import Topology
from ..vocab.combos import Combination
from ..vocab.contract import TopologyContract
from ..vocab.folders import ITER_FOLDER


def evidence_from(
    events: Iterable[Event],
    *,
    combo: Combination,
    save_topology: Topology,
    never_stopped: Callable[[int], str],
    topology: str | None = None,
    faults_configured: list[dict] | None = None,
    expect: dict | None = None,
    contract: TopologyContract | None = None,
    converted: Callable | None = None,
) -> Evidence:
    """The evidence of a history (events of every rank, in order). `topology` is the job topology for
    histories without job events (the world every rank of a save must answer from); `converted` what a load
    that changes the parameters' dtype must give (checkers.base.PrecisionTargets by iteration and dtypes)."""
    reading = _Reading(topology)
    for i, e in enumerate(events):
        reading.take(i, e)
    reading.finish()
    return Evidence(
        combo,
        save_topology,
        sorted(reading.saves.values(), key=lambda s: s.index),
        reading.loads,
        reading.corruptions,
        reading.crashes,
        [],
        never_stopped,
        list(faults_configured or []),
        reading.fired,
        dict(expect or {}),
        reading.errors,
        reading.blocked,
        contract,
        converted,
        sorted(reading.recoveries.values(), key=lambda r: r["job"]),
        reading.load_splits,
        reading.hangs,
    )


@dataclass
class _Reading:
    """What a history said so far, read event by event (`take`), then settled once it ended (`finish`)."""

    topology: str | None  # the job topology of histories without job events
    saves: dict[str, SaveRecord] = field(default_factory=dict)
    open_saves: dict[tuple, list[str]] = field(default_factory=dict)  # (job, rank) -> ids invoked, not answered
    invoked: dict[tuple, int] = field(default_factory=dict)  # (job, rank) -> saves it invoked
    loads: list[LoadRecord] = field(default_factory=list)
    corruptions: list[dict] = field(default_factory=list)
    crashes: list[dict] = field(default_factory=list)
    fired: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    # ranks still running a while after another raised: {"job", "rank", "error", "stacks"}
    blocked: list[dict] = field(default_factory=list)
    topo_of_job: dict[int, str] = field(default_factory=dict)
    recoveries: dict[int, dict] = field(default_factory=dict)
    current_load: LoadRecord | None = None
    # each load of a job, by (job, its ordinal on the rank): rank 0's record and every rank's outcome
    load_seen: dict[tuple, int] = field(default_factory=dict)
    load_record: dict[tuple, LoadRecord] = field(default_factory=dict)
    load_outcomes: dict[tuple, dict[int, dict]] = field(default_factory=dict)
    load_splits: list[dict] = field(default_factory=list)
    hangs: list[dict] = field(default_factory=list)
    unfinished: dict[tuple, list[dict]] = field(default_factory=dict)  # (job, rank) -> ops its job's end left open

    def take(self, i: int, e: Event) -> None:
        """Event `i` of the history, by the operation it is of."""
        v = e.value
        if e.type == INFO and v.get("outcome") == "unknown" and isinstance(e.process, int):
            self.unfinished.setdefault((e.job, e.process), []).append({"op": e.f, "iteration": v.get("iteration")})
        elif e.f == "job" and e.type != INVOKE and v.get("timed_out"):
            self.hangs += _hung(v, self.unfinished)
        read = _BY_OP.get(e.f)
        if read is not None:
            read(self, i, e)

    def finish(self) -> None:
        """What only the whole history tells: saves that raised everywhere, what each recovery came after,
        and each load as every rank saw it."""
        for rec in self.saves.values():
            if rec.status != OK and rec.errors and not rec.ok_ranks:
                rec.status = FAILED  # raised on every rank that answered: definitely not done
        for r in self.recoveries.values():  # what each recovery came after: the saves and finalizes that raised
            r["survived"] = [
                err
                for err in self.errors
                if err["job"] == r["job"] and err["index"] < r["index"] and not err.get("recovery")
            ]
        self.load_splits = _every_rank(self.load_outcomes, self.load_record)

    def _job(self, i: int, e: Event) -> None:
        """A job's start (its topology; whether it recovers) or end (crashes, blocked ranks)."""
        v = e.value
        if e.type == INVOKE:
            self.topo_of_job[v["job"]] = v["topology"]
            if any(op.get("op") == "recover" for op in v.get("ops") or [] if isinstance(op, dict)):
                self.recoveries[v["job"]] = _recovery(v["job"], i)
        elif v.get("job") in self.recoveries and "statuses" in v:
            self.recoveries[v["job"]]["ended"] = {k: v[k] for k in ("statuses", "signals", "timed_out") if k in v}
            _crashed(v, i, self.crashes, self.blocked)
        elif v.get("signals") or v.get("blocked"):
            _crashed(v, i, self.crashes, self.blocked)

    def _recover(self, i: int, e: Event) -> None:
        if e.type == INVOKE:
            rec_of = self.recoveries.setdefault(e.job, _recovery(e.job, i))
            rec_of.update(started=True, index=i)  # the last rank's: each rank logs its own errors before it

    def _save(self, i: int, e: Event) -> None:
        """One rank's invoke or answer of a save, onto the save's one record."""
        v = e.value
        sid = _save_id(e, self.saves, self.open_saves, self.invoked)
        if sid is None:
            return
        rec = self.saves.get(sid)
        if rec is None:
            topo = self.topo_of_job.get(e.job) or self.topology or ""
            iteration: int = v.get("iteration")  # type: ignore[assignment]  # every save names one
            rec = self.saves[sid] = SaveRecord(
                e.job, iteration, topo, None, None, INFO, i, sid, Topology.parse(topo).world if topo else 1
            )
        if e.type == INVOKE:
            rec.invoked_at.setdefault(e.process, e.time)
            if v.get("generation") is not None:
                rec.generation = v["generation"]
            if v.get("dtype"):
                rec.dtype = v["dtype"]
            if v.get("fingerprint"):
                rec.fingerprint, rec.rng = v["fingerprint"], v.get("rng")
            rec.recovery = rec.recovery or bool(v.get("recovery"))
        elif e.type == OK and e.process not in rec.ok_ranks:
            rec.ok_ranks.append(e.process)
            rec.returned_at[e.process] = e.time
            if len(rec.ok_ranks) >= rec.world and rec.status != OK:
                rec.status, rec.index = OK, i
        elif e.type == FAILED:
            rec.errors[e.process] = v.get("error", "")
            self.errors.append(_error(e, i, "finalize" if v.get("via") == "finalize" else "save", sid))

    def _finalize(self, i: int, e: Event) -> None:
        v = e.value
        if e.type == FAILED and v.get("save_id") is None and v.get("iteration") is None:
            self.errors.append(_error(e, i, "finalize", None))  # nothing was in flight: no save carries it

    def _load(self, i: int, e: Event) -> None:
        """A load's end on one rank: its outcome, and rank 0's record of it."""
        if e.type not in (OK, FAILED):
            return
        n = self.load_seen[(e.job, e.process)] = self.load_seen.get((e.job, e.process), 0) + 1
        self.load_outcomes.setdefault((e.job, n), {})[e.process] = {"status": e.type, **e.value}
        if e.process != 0:
            return
        topology = e.value.get("topology", self.topo_of_job.get(e.job, self.topology or ""))
        self.current_load = self.load_record[(e.job, n)] = _load_record(e, i, topology)
        self.loads.append(self.current_load)

    def _continue(self, i: int, e: Event) -> None:
        """Training on after rank 0's latest load, in the same job."""
        if e.process == 0 and self.current_load is not None and self.current_load.job == e.job:
            self.current_load.continued.append((e.value["iteration"], e.value["fingerprint"]))

    def _corrupt(self, i: int, e: Event) -> None:
        if e.type == OK:  # INFO: it found nothing to damage
            self.corruptions.append(dict(e.value, index=i))

    def _fault(self, i: int, e: Event) -> None:
        v = e.value
        if e.type not in (OK, INFO):
            return
        self.fired.append(dict(v, job=e.job))
        if v.get("kind") == "torn_write":
            # a write that reports success but lands damaged is silent corruption of that save: no
            # writer can know, so it is judged like damage at rest (detected, never loaded wrong)
            m = ITER_FOLDER.search(str(v.get("path", "")))
            self.corruptions.append(dict(v, index=i, iteration=int(m.group(1)) if m else None))


# what reads an event, by its operation (an operation not named here says nothing to the checkers)
_BY_OP: dict[str, Callable[[_Reading, int, Event], None]] = {
    "job": _Reading._job,
    "recover": _Reading._recover,
    "save": _Reading._save,
    "finalize": _Reading._finalize,
    "load": _Reading._load,
    "continue": _Reading._continue,
    "corrupt": _Reading._corrupt,
    "fault": _Reading._fault,
}


def _recovery(job: int, index: int) -> dict:
    """A job's recovery before anything is known of it: {"job", "index", "started", "survived", "ended"}."""
    return {"job": job, "index": index, "started": False, "survived": [], "ended": {}}


def _load_record(e: Event, index: int, topology: str) -> LoadRecord:
    """Rank 0's record of a load that ended (ok or fail), from its event."""
    v = e.value
    return LoadRecord(
        e.job,
        topology,
        e.type,
        index,
        v.get("iteration"),
        v.get("fingerprint"),
        v.get("rng"),
        bool(v.get("rng_restored")),
        list(v.get("warnings") or []),
        v.get("error", ""),
        bool(v.get("refused")),
        v.get("path", ""),
        v.get("crash_state"),
        generations=v.get("generations"),
        dtype=v.get("dtype"),
        captured=list(v.get("captured") or []),
        recovery=str(v.get("recovery") or ""),
        raw=v.get("raw"),
        not_exception=list(v.get("not_exception") or []),
    )


def _hung(v: dict, unfinished: dict[tuple, list[dict]]) -> list[dict]:
    """The ranks of a job that were still running when its timeout ended it, with what they were in."""
    hung = v.get("hung") or {}
    return [
        {
            "job": v["job"],
            "rank": int(r),
            "ops": unfinished.get((v["job"], int(r)), []),
            "seconds": v.get("seconds"),
            "stacks": (hung.get(r) or hung.get(str(r)) or {}).get("stacks", ""),
        }
        for r, status in sorted((v.get("statuses") or {}).items(), key=lambda x: int(x[0]))
        if status == "timeout"
    ]


def _texts(v: dict) -> str:
    """The error a load raised and, under it, what the library raised."""
    raw = (v.get("raw") or {}).get("error")
    return f"{v.get('error', '')}\n{raw}" if raw else str(v.get("error", ""))


def _crashed(v: dict, index: int, crashes: list[dict], blocked: list[dict]) -> None:
    """A job's end: ranks killed by a signal, and ranks blocked after another raised."""
    if v.get("signals"):
        crashes.append({"job": v["job"], "index": index, "signals": v["signals"]})
    blocked.extend(dict(b, job=v["job"], rank=int(r)) for r, b in (v.get("blocked") or {}).items())


def _every_rank(outcomes: dict[tuple, dict[int, dict]], records: dict[tuple, LoadRecord]) -> list[dict]:
    """What every rank said of each load, onto rank 0's record: each rank's error (the one naming the damaged
    file may be any), the warnings any rank heard (a library may warn about the shard it read), and whether
    the ranks split. A load that returned on some ranks and raised on others failed (a resume needs every
    rank), with the first error; the splits are returned."""
    splits = []
    for key, by_rank in sorted(outcomes.items()):
        failed = {r: o for r, o in sorted(by_rank.items()) if o["status"] == FAILED}
        ok = sorted(r for r, o in by_rank.items() if o["status"] == OK)
        if failed and ok:
            splits.append({"job": key[0], "ok": ok, "errors": {r: str(o.get("error", "")) for r, o in failed.items()}})
        rec = records.get(key)
        if rec is None:
            continue
        rec.rank_errors = {r: _texts(o) for r, o in failed.items()}
        for rank, o in sorted(by_rank.items()):
            for text in o.get("captured") or [] if rank else []:
                if text not in rec.captured:
                    rec.captured.append(f"rank {rank}: {text}")
        if failed and ok and rec.status == OK:
            rank, first = next(iter(failed.items()))
            rec.status, rec.fingerprint, rec.rng = FAILED, None, None
            rec.error, rec.refused = f"rank {rank}: {first.get('error', '')}", bool(first.get("refused"))
    return splits


def _save_id(e: Event, saves: dict, open_saves: dict, invoked: dict) -> str | None:
    """The save an event belongs to: its own save id, else the rank's n-th save invoked in that job."""
    if e.value.get("save_id") is not None:
        return str(e.value["save_id"])
    key = (e.job, e.process)
    if e.type == INVOKE:
        invoked[key] = invoked.get(key, 0) + 1
        sid = f"{e.job}.{invoked[key]}"
        open_saves.setdefault(key, []).append(sid)
        return sid
    iteration = e.value.get("iteration")
    for sid in open_saves.get(key, []):  # the oldest open save of that iteration on this rank
        if saves[sid].iteration == iteration:
            open_saves[key].remove(sid)
            return sid
    for rec in saves.values():  # a rank that logged no invoke: the oldest save of that iteration it left unanswered
        if rec.job == e.job and rec.iteration == iteration and e.process not in rec.ok_ranks | rec.errors.keys():
            return rec.save_id
    return None


def _error(e: Event, index: int, op: str, save_id: str | None) -> dict:
    v = e.value
    return {
        "op": op,
        "save_id": save_id,
        "job": e.job,
        "rank": e.process,
        "iteration": v.get("iteration"),
        "error": v.get("error", ""),
        "errno": v.get("errno"),
        "index": index,
        **({"not_exception": v["not_exception"]} if v.get("not_exception") else {}),
        **({"raw": v["raw"]} if v.get("raw") else {}),
        **({"recovery": True} if v.get("recovery") else {}),
    }
