"""Failure symmetry: every rank of a collective save, finalize or load ends it the same way.

In a real job a rank that raises while the others wait in a collective is a hang (the job burns its
allocation until a watchdog fires), and ranks that disagree (some return, some raise) leave the training
loop with two views of whether the checkpoint exists (LOCAL saves excepted: each rank saves its own, with
no collective, and a load agrees on the newest every rank holds). FAIL names the ranks, what each did, and, for a
blocked rank, where it waited (its Python stacks, taken before it was killed)."""

from __future__ import annotations

import re

from ..vocab import CheckpointType
from .base import FAIL, NA, PASS, Verdict
from .evidence import Evidence

_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def waiting_in(stacks: str) -> str:
    """The innermost frame of the main thread's stack, as 'function (file:line)'."""
    block = stacks.split("\n\n")[0] if stacks else ""
    for line in block.splitlines()[1:]:  # faulthandler lists the innermost frame first
        m = _FRAME.search(line)
        if m:
            return f"{m.group(3)} ({m.group(1).rsplit('/', 1)[-1]}:{m.group(2)})"
    return "an unknown place"


class FailureSymmetry:
    name = "symmetry"

    def check(self, ev: Evidence) -> Verdict:
        if ev.blocked:
            b = ev.blocked[0]
            raised = [e for e in ev.errors if e.get("job") == b["job"]]
            after = b.get("after") or {}  # the runner's record of the rank that raised first
            if raised:
                who = f"rank {raised[0]['rank']} raised {str(raised[0].get('error', ''))[:160]}"
            elif after:
                who = f"rank {after['rank']} raised {str(after.get('error', ''))[:160]}"
            else:
                who = "another rank raised"
            return Verdict(
                self.name,
                FAIL,
                f"{who}, while rank {b['rank']} stayed blocked in {waiting_in(b.get('stacks', ''))}: "
                f"in a real job this hangs until a timeout"
                + (f"; {len(ev.blocked) - 1} more ranks blocked" if len(ev.blocked) > 1 else ""),
                ev.blocked,
            )
        split = [s for s in ev.saves if s.ok_ranks and s.errors]
        if split and ev.combo.type is CheckpointType.LOCAL:  # per-rank saves with no collective, by design
            return Verdict(
                self.name,
                PASS,
                f"save {split[0].save_id} returned on ranks {sorted(split[0].ok_ranks)} "
                f"and raised on ranks {sorted(split[0].errors)}: LOCAL saves are per "
                f"rank with no collective, so each rank answers for its own; no rank "
                f"was left waiting",
            )
        if split:
            s = split[0]
            return Verdict(
                self.name,
                FAIL,
                f"save {s.save_id} (iteration {s.iteration}) returned on ranks {sorted(s.ok_ranks)} "
                f"and raised on ranks {sorted(s.errors)}: "
                + "; ".join(f"rank {r}: {str(e)[:120]}" for r, e in sorted(s.errors.items())),
                [{"save_id": s.save_id, "ok": sorted(s.ok_ranks), "errors": s.errors}],
            )
        if ev.load_splits:
            ls = ev.load_splits[0]
            return Verdict(
                self.name,
                FAIL,
                f"a load in job {ls['job']} returned on ranks {ls['ok']} and raised on ranks {sorted(ls['errors'])}: "
                "in a real job the ranks that loaded go on to train while the others exit, and every restart "
                "meets the same split; "
                + "; ".join(f"rank {r}: {str(e)[:120]}" for r, e in sorted(ls["errors"].items())),
                ev.load_splits,
            )
        if not ev.errors:
            return Verdict(self.name, NA, "no rank raised")
        return Verdict(self.name, PASS, f"{len(ev.errors)} errors raised; every rank of each ended it the same way")
