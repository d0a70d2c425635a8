"""Recovery: after a fault the job survived in process, the same processes save and load again.

A save or finalize that raised (a full disk, an I/O error, a failed background write) is survivable: a
training loop catches it and trains on to the next checkpoint. A fault that poisons the process (a lock or
"save in progress" flag never released on the error path, an async queue left holding the failed request,
metadata cached from the failed save) passes a restart unseen, since a new process starts clean; in a real
job it is the next checkpoint, hours later, that fails. A scenario's `recover` step makes the same ranks,
with the same backend object, load the newest checkpoint, train a step, save, finalize and load that save
back into a fresh state. FAIL: after the fault, the load or the save raised, the save never returned on
every rank, or what loaded back is not what it saved. PASS names the iteration saved and loaded back. N/A
when no fault was survived in process: no recover step, nothing raised before it, or the job ended first
(a rank killed)."""

from __future__ import annotations

from .base import FAIL, NA, PASS, Verdict
from .evidence import Evidence, LoadRecord, SaveRecord
from .saves import describe


class Recovery:
    name = "recovery"

    def check(self, ev: Evidence) -> Verdict:
        if not ev.recoveries:
            return Verdict(self.name, NA, "the scenario has no recover step")
        # a rank killed in the job is no fault survived in process, whatever the others did after it
        ran = [r for r in ev.recoveries if r["started"] and r["survived"] and not (r.get("ended") or {}).get("signals")]
        if not ran:
            return Verdict(self.name, NA, _why_not(ev.recoveries))
        problems: list[dict] = []
        passed: list[dict] = []
        for r in ran:
            found = _judge(r, ev)
            (problems if found.get("problem") else passed).append(found)
        if problems:
            more = f"; {len(problems) - 1} more" if len(problems) > 1 else ""
            return Verdict(self.name, FAIL, problems[0]["problem"] + more, problems + passed)
        first = passed[0]
        return Verdict(
            self.name,
            PASS,
            f"after {first['after']}, job {first['job']} saved iteration {first['saved_iteration']} "
            f"(save {first['save_id']}) and loaded it back equal"
            + (f"; {len(passed) - 1} more recoveries" if len(passed) > 1 else ""),
            passed,
        )


def _why_not(recoveries: list[dict]) -> str:
    """Why no recovery came after a survived fault."""
    r = recoveries[0]
    ended = r.get("ended") or {}
    signals = ended.get("signals") or {}
    if signals:
        how = ", ".join(f"rank {k} by signal {v}" for k, v in sorted(signals.items()))
        return f"no fault was survived in process: ranks of job {r['job']} were killed ({how})"
    if not r["started"]:
        statuses = {k: s for k, s in (ended.get("statuses") or {}).items() if s != "ok"}
        how = ", ".join(f"rank {k} {s}" for k, s in sorted(statuses.items())) or "its ranks never reached it"
        return f"no fault was survived in process: job {r['job']} ended before its recovery ({how})"
    return f"nothing raised before the recovery in job {r['job']}: no fault was survived to recover from"


def _judge(r: dict, ev: Evidence) -> dict:
    """What one recovery did: its save and its loads, and the first problem with them ('' when none)."""
    job = r["job"]
    after = _briefly(r["survived"][0])
    out: dict = {"job": job, "after": after, "survived": len(r["survived"])}
    saves = [s for s in ev.saves if s.recovery and s.job == job]
    loads = {ld.recovery: ld for ld in ev.loads if ld.recovery and ld.job == job}
    first = loads.get("fault")
    if first is not None and first.status != "ok" and ev.acknowledged_before(first.index):
        owed = max(s.iteration for s in ev.acknowledged_before(first.index))
        out["problem"] = (
            f"after {after}, a load in the same job failed although iteration {owed} was saved: {first.error[:200]}"
        )
        return out
    if not saves:
        out["problem"] = f"after {after}, the recovery never saved ({_ended(r)})"
        return out
    s = saves[-1]
    out.update(save_id=s.save_id, saved_iteration=s.iteration)
    if not s.acknowledged:
        out["problem"] = f"after {after}, the next save {s.save_id} (iteration {s.iteration}) {_unanswered(s, r)}"
        return out
    back = loads.get("save")
    out["problem"] = _loaded_back(back, s, after)
    if back is not None:
        out.update(loaded_iteration=back.iteration, fingerprint=back.fingerprint)
    if not out["problem"]:
        del out["problem"]
    return out


def _briefly(err: dict) -> str:
    """What raised, in one line: a gathered error's first line, its message cut short."""
    kind, _, message = str(err.get("error") or "").split("\n", 1)[0].partition(": ")
    return describe(dict(err, error=f"{kind}: {message[:120]}" if message else kind))


def _unanswered(s: SaveRecord, r: dict) -> str:
    if s.errors:
        rank, error = sorted(s.errors.items())[0]
        ok = f" (returned on ranks {sorted(s.ok_ranks)})" if s.ok_ranks else ""
        return f"raised on ranks {sorted(s.errors)}{ok}: rank {rank}: {str(error)[:200]}"
    silent = sorted(set(range(s.world)) - set(s.ok_ranks))
    return f"never returned on ranks {silent} ({_ended(r)})"


def _loaded_back(ld: LoadRecord | None, s: SaveRecord, after: str) -> str:
    if ld is None:
        return (
            f"after {after}, save {s.save_id} (iteration {s.iteration}) was acknowledged but loading it back "
            "never returned"
        )
    if ld.status != "ok":
        return f"after {after}, save {s.save_id} (iteration {s.iteration}) did not load back: {ld.error[:200]}"
    if ld.iteration != s.iteration:
        return (
            f"after {after}, save {s.save_id} (iteration {s.iteration}) was acknowledged but the load in the "
            f"same job gave iteration {ld.iteration}"
        )
    if s.fingerprint is not None and ld.fingerprint != s.fingerprint:
        return (
            f"after {after}, save {s.save_id} (iteration {s.iteration}) loaded back different: fingerprint "
            f"{ld.fingerprint}, saved {s.fingerprint}"
        )
    return ""


def _ended(r: dict) -> str:
    ended = r.get("ended") or {}
    if ended.get("timed_out"):
        return "the job timed out"
    bad = {k: s for k, s in (ended.get("statuses") or {}).items() if s != "ok"}
    return ", ".join(f"rank {k} {s}" for k, s in sorted(bad.items())) or "the job ended"
