"""Liveness: a job that only had to survive a fault ends on its own.

After a fault that leaves every rank process alive (an error raised, a background writer killed), each
rank must come back from its save, finalize or load, returning or raising. A rank still inside one when the
job's timeout ended it is a hang: in a real job it holds the allocation until a watchdog fires, and nothing
says why. FAIL names the ranks, the operation each was in and, when its stacks were taken, where it waited.
A rank still running a while after another raised ("blocked", which the symmetry checker judges as a
split) is a hang here too. PASS when such a fault fired and every job it fired in ended. N/A when no fault
fired, or a rank of that job was killed or stopped (its peers' waits are expected then)."""

from __future__ import annotations

from .base import FAIL, NA, PASS, Verdict
from .evidence import Evidence
from .symmetry import waiting_in

_NOT_SURVIVED = frozenset({"rank_kill", "rank_crash", "rank_hang"})  # faults that end or freeze a rank


class Liveness:
    name = "hang"

    def check(self, ev: Evidence) -> Verdict:
        # a job where a rank was killed or stopped had faults its ranks did not survive: peers' waits expected
        killed = {c["job"] for c in ev.crashes} | {
            f.get("job") for f in ev.faults_fired if f.get("kind") in _NOT_SURVIVED
        }
        survived = {f["job"] for f in ev.faults_fired if f.get("job") is not None} - killed
        if not survived:
            return Verdict(self.name, NA, "no fault fired in a job whose ranks all lived on")
        hung = [h for h in ev.hangs if h["job"] in survived]
        blocked = [b for b in ev.blocked if b["job"] in survived]
        if not hung and not blocked:
            jobs = ", ".join(str(j) for j in sorted(survived))
            return Verdict(self.name, PASS, f"every job a fault fired in ended on its own (job {jobs})")
        if not hung:  # torn down while still waiting, a while after another rank raised
            b = blocked[0]
            fault = next((f for f in ev.faults_fired if f.get("job") == b["job"]), {})
            after = b.get("after") or {}
            return Verdict(
                self.name,
                FAIL,
                f"hang: after {fault.get('text') or fault.get('kind', 'a fault')} in job {b['job']}, rank {b['rank']} "
                f"stayed blocked in {waiting_in(b.get('stacks', ''))}"
                + (f" after rank {after['rank']} raised" if "rank" in after else "")
                + "; the job was torn down, a real one waits until a watchdog fires",
                blocked,
            )
        h = hung[0]
        fault = next((f for f in ev.faults_fired if f.get("job") == h["job"]), {})
        where = f", waiting in {waiting_in(h['stacks'])}" if h.get("stacks") else ""
        others = sorted({x["rank"] for x in hung if x["job"] == h["job"]} - {h["rank"]})
        return Verdict(
            self.name,
            FAIL,
            f"hang: after {fault.get('text') or fault.get('kind', 'a fault')} in job {h['job']}, rank {h['rank']} "
            f"never came back from {_ops(h)}{where}; still running when the job was ended after "
            f"{h.get('seconds', '?')} s" + (f" (and ranks {others})" if others else ""),
            hung,
        )


def _ops(h: dict) -> str:
    ops = h.get("ops") or []
    if not ops:
        return "its operation"
    last = ops[-1]
    return f"{last['op']}" + (f" of iteration {last['iteration']}" if last.get("iteration") is not None else "")
