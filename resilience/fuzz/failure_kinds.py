"""What tells one failure from another, and what an UNPROBED case left untested.

Hypothesis tells bugs apart by the exception's type (and where it is raised): a failing example shrinks
only to examples raising the same type, and `--all-bugs` reports one minimal example per type. So the type
(judge.failure_class) is named after the verdict, the checker giving it and, for a FAIL, the kind of its
evidence: a durability FAIL where a deletion destroyed the acknowledged save, one after a power loss and
one where an overwrite did are three bugs, not one. The vocabulary is small and stable, in precedence:

- what destroyed the data, when the evidence names the operation (an `op` of an evidence item or of its
  `culprits`): deleted (unlink, rmtree), renamed_over (rename, exchange), truncated, overwritten
  (create or write over acknowledged data);
- power_loss: the load read a power-loss state (`crash_state`), or a lost_unsynced_writes fault fired;
- early_return: a rank reported a save done while another rank still wrote its part (durability);
- the family of the faults that fired: crash (rank_crash, rank_kill, writer_kill, rank_hang), io_error
  (io_error, short_write, torn_write, slow_write) or damage (a file damaged at rest);
- no_fault: nothing fired, the implementation did it on its own.

UNKNOWN is told apart by its checker alone: its evidence is an error, not a finding."""

from __future__ import annotations

import re

from ..checkers.case import FIRED, NOT_IN_BACKEND
from ..verdicts import FAIL, UNPROBED

DELETED, RENAMED_OVER, TRUNCATED, OVERWRITTEN = "deleted", "renamed_over", "truncated", "overwritten"
POWER_LOSS, EARLY_RETURN, CRASH, IO_ERROR, DAMAGE, NO_FAULT = (
    "power_loss",
    "early_return",
    "crash",
    "io_error",
    "damage",
    "no_fault",
)
EVIDENCE_KINDS = (
    DELETED,
    RENAMED_OVER,
    TRUNCATED,
    OVERWRITTEN,
    POWER_LOSS,
    EARLY_RETURN,
    CRASH,
    IO_ERROR,
    DAMAGE,
    NO_FAULT,
)

# an operation named by the evidence (the seam's and the file system's op names) -> what it did to the data
_OPS = {
    "unlink": DELETED,
    "rmtree": DELETED,
    "rmdir": DELETED,
    "remove": DELETED,
    "delete": DELETED,
    "rename": RENAMED_OVER,
    "exchange": RENAMED_OVER,
    "replace": RENAMED_OVER,
    "truncate": TRUNCATED,
    "ftruncate": TRUNCATED,
    "create": OVERWRITTEN,
    "write": OVERWRITTEN,
    "overwrite": OVERWRITTEN,
}
# a fired fault's kind -> its family; anything else that fires is damage at rest
_FAMILIES = {
    "lost_unsynced_writes": POWER_LOSS,
    "rank_crash": CRASH,
    "rank_kill": CRASH,
    "writer_kill": CRASH,
    "rank_hang": CRASH,
    "io_error": IO_ERROR,
    "short_write": IO_ERROR,
    "torn_write": IO_ERROR,
    "slow_write": IO_ERROR,
}


def failing_verdict(result):
    """The first checker's Verdict giving the case's verdict (None: no checker gave it)."""
    return next((v for v in result.verdicts if v.status == result.verdict), None)


def evidence_kind(result) -> str:
    """The kind of the case's failure (one of EVIDENCE_KINDS) for a FAIL; '' for any other verdict."""
    if result.verdict != FAIL:
        return ""
    verdict = failing_verdict(result)
    items = [e for e in (verdict.evidence if verdict is not None else None) or [] if isinstance(e, dict)]
    done = [_OPS[op] for op in _ops_named(items) if op in _OPS]
    if done:
        return min(done, key=EVIDENCE_KINDS.index)  # the most destructive operation named
    if any(e.get("crash_state") for e in items):
        return POWER_LOSS
    if any("writing" in e and "save_id" in e for e in items):  # durability.early_returns
        return EARLY_RETURN
    families = [_FAMILIES.get(kind, DAMAGE) for kind in fired_kinds(result)]
    return min(families, key=EVIDENCE_KINDS.index) if families else NO_FAULT


def _ops_named(items: list[dict]) -> list[str]:
    out = []
    for item in items:
        for d in [item, *(c for c in item.get("culprits") or [] if isinstance(c, dict))]:
            op = d.get("op") or d.get("operation")
            if isinstance(op, str):
                out.append(op.lower())
    return out


def fired_kinds(result) -> list[str]:
    """The kinds of the case's faults that fired (a fault record's text starts with its kind), each once."""
    kinds = (str(f.get("fault", "")).split(" ", 1)[0] for f in result.faults if f.get("status") == FIRED)
    return list(dict.fromkeys(k for k in kinds if k))


def camel(word: str) -> str:
    """'power_loss' -> 'PowerLoss', as the failure classes are named."""
    return "".join(p.title() for p in re.split(r"[_\-\s]+", word) if p)


def gap_reasons(result) -> list[str]:
    """Why an UNPROBED case tested nothing, each reason short and free of the case's numbers, so the fuzz
    report counts them: '<fault kind>: never fired' per configured fault that did not act, else the
    UNPROBED checker's detail ('saves: none of N saves was acknowledged on every rank')."""
    if result.verdict != UNPROBED:
        return []
    faults = [f for f in result.faults if f.get("status") not in (FIRED, NOT_IN_BACKEND)]
    reasons = [f"{str(f.get('fault', '')).split(' ', 1)[0] or 'fault'}: {f.get('status')}" for f in faults]
    if not reasons:
        reasons = [
            f"{v.checker}: {re.sub(r'[0-9]+', 'N', v.detail.split(';', 1)[0])[:120]}"
            for v in result.verdicts
            if v.status == UNPROBED
        ]
    return list(dict.fromkeys(reasons)) or ["UNPROBED"]


__all__ = ["EVIDENCE_KINDS", "camel", "evidence_kind", "failing_verdict", "fired_kinds", "gap_reasons"]
