"""Saves: an implementation error is never N/A.

A save or finalize that raised where no planned fault explains it is the implementation failing (FAIL),
or the environment refusing the test (UNKNOWN: a full disk, a quota, a read-only or failing device,
named by its errno; or every failing rank timing out in a collective, as on an overloaded machine). A case
whose every save failed acknowledged nothing, so durability was not probed: UNPROBED, never PASS."""

from __future__ import annotations

import re

from .base import FAIL, NA, PASS, UNKNOWN, UNPROBED, Verdict
from .evidence import Evidence

# the environment, not the code under test, refused the write: the case could not be judged
ENVIRONMENT_ERRNOS = frozenset({"ENOSPC", "EDQUOT", "EROFS", "EIO"})
# a collective of the process group that gave up waiting (gloo's, or the store's under it): on a loaded
# machine the peers were only slow. When every failing rank says so, nothing points at the code under
# test; one rank raising anything else makes it the code's failure.
_COLLECTIVE_TIMEOUT = re.compile(
    r"(?i)(gloo|c10d|processgroup|tcpstore|store)\b.*(timed out|timeout)|"
    r"(timed out|timeout).*\b(gloo|c10d|collective|barrier|all_?reduce|all_?gather|"
    r"broadcast|reduce_scatter)"
)


def collective_timeout(err: dict) -> bool:
    return bool(_COLLECTIVE_TIMEOUT.search(str(err.get("error") or "")))


def explained(err: dict, ev: Evidence) -> bool:
    """A planned fault fired, or a rank was killed, in the job where the save failed."""
    return any(f.get("job") == err.get("job") for f in ev.faults_fired) or any(
        c.get("job") == err.get("job") for c in ev.crashes
    )


def describe(err: dict) -> str:
    """'save raised OSError ENOSPC: No space left on device on rank 1 (save 0.2, iteration 3)'."""
    text = err.get("error") or "an error"
    kind, _, message = text.partition(": ")
    message = re.sub(r"^\[Errno \d+\] ", "", message)
    name = f" {err['errno']}" if err.get("errno") and err["errno"] not in kind else ""
    where = f" (save {err['save_id']}, iteration {err.get('iteration')})" if err.get("save_id") else ""
    return f"{err.get('op', 'save')} raised {kind}{name}: {message or kind} on rank {err.get('rank')}{where}"


class SaveOutcomes:
    name = "saves"

    def check(self, ev: Evidence) -> Verdict:
        unexplained = [err for err in ev.errors if not explained(err, ev)]
        if unexplained:
            first = next(
                (err for err in unexplained if err.get("errno") in ENVIRONMENT_ERRNOS),
                next((err for err in unexplained if not collective_timeout(err)), unexplained[0]),
            )
            status, why = FAIL, ""
            if first.get("errno") in ENVIRONMENT_ERRNOS:
                status, why = UNKNOWN, " (the environment refused the write: the code under test could not be judged)"
            elif all(collective_timeout(err) for err in unexplained):
                status, why = (
                    UNKNOWN,
                    (
                        " (every failing rank timed out in a collective and none raised anything "
                        "else: the ranks were too slow on this machine to judge; replay the case "
                        "or give the scenario a longer timeout)"
                    ),
                )
            more = f"; {len(unexplained) - 1} more" if len(unexplained) > 1 else ""
            return Verdict(self.name, status, f"{describe(first)}{why}{more}", unexplained[:20])
        if not ev.saves:
            return Verdict(self.name, NA, "no save in this scenario")
        acked = [s for s in ev.saves if s.acknowledged]
        failed = [s for s in ev.saves if s.status == "fail"]
        if not acked:
            why = f": {describe(ev.errors[0])}" if ev.errors else ""
            return Verdict(
                self.name,
                UNPROBED,
                f"none of {len(ev.saves)} saves was acknowledged on every rank"
                f"{why}; nothing durable was there to probe",
                [_row(s) for s in ev.saves[:20]],
            )
        rest = len(ev.saves) - len(acked) - len(failed)
        return Verdict(
            self.name,
            PASS,
            f"{len(acked)} of {len(ev.saves)} saves acknowledged on every rank"
            + (f", {len(failed)} failed as a planned fault explains" if failed else "")
            + (f", {rest} indeterminate" if rest else ""),
        )


def _row(s) -> dict:
    return {
        "save_id": s.save_id,
        "iteration": s.iteration,
        "status": s.status,
        "ok_ranks": s.ok_ranks,
        "errors": {str(k): v for k, v in s.errors.items()},
    }
