"""`resilience job --fuzz`: fault schedules for a training job drawn with Hypothesis (which column, which
save, which rank, which byte of a kill in a write, how many restarts the scheduler allows), each one a case
run as the matrix runs it, and the first failure shrunk to a minimal schedule with its replay command.

A schedule is a column aimed with `COLUMN@save=N,rank=R,byte=B` (columns.parse_column), so its replay is
`resilience job --column ... --max-restarts K --golden G -- COMMAND`. Shrinking keeps the failure: an
example counts as failing only when it fails the same checkers as the first failure found (FAIL or
UNKNOWN); an UNPROBED or N/A example is a gap in the search, counted and never the shrink target. Each
distinct schedule runs once (a repeat is answered from the first run), and shrinking stops starting new
cases after --shrink-budget seconds."""

from __future__ import annotations

import dataclasses
import os
import random
import time
from dataclasses import dataclass

from ..report.result_row import ResultRow
from ..verdicts import FAIL, UNKNOWN
from .case import run_case
from .golden import Reference
from .options import JobOptions

# the columns drawn: each aimable at a save (the power-loss, slow-disk and sigterm columns are left to the
# matrix: a restart per crash state, seconds of held writes, a grace each, for every example)
FUZZED = (
    "kill-rank-write",
    "eio",
    "enospc",
    "kill-job-mid-save",
    "kill-job-between",
    "truncate",
    "bit-flip",
    "delete",
    "tracker-empty",
    "chained",
)
RANKED = {"kill-rank-write", "eio", "enospc", "kill-job-mid-save", "truncate", "bit-flip", "delete"}
BYTES = (0, 1, 512, 4096, 65536)


@dataclass(frozen=True)
class Schedule:
    column: str
    save: int
    rank: int
    byte: int
    restarts: int

    def spec(self) -> str:
        aim = [f"save={self.save}"]
        if self.column in RANKED:
            aim.append(f"rank={self.rank}")
        if self.column == "kill-rank-write":
            aim.append(f"byte={self.byte}")
        return f"{self.column}@{','.join(aim)}"


@dataclass
class FuzzOutcome:
    rows: list[ResultRow]
    minimal: ResultRow | None
    minimal_schedule: Schedule | None
    failures: int  # examples that failed (any way)
    gaps: dict[str, int]  # verdict (UNPROBED, N/A) -> examples
    seconds: float


def schedules(ref: Reference):
    from hypothesis import strategies as st

    saves = max(1, len(ref.layout.saves))
    ranks = list(ref.layout.ranks) or [0]
    return st.builds(
        Schedule,
        st.sampled_from(FUZZED),
        st.integers(1, saves),
        st.sampled_from(ranks),
        st.sampled_from(BYTES),
        st.integers(1, 3),
    )


def fuzz_cases(
    options: JobOptions, ref: Reference, folder, *, examples: int, seed: int, shrink_budget: float, say
) -> FuzzOutcome:
    """Draw `examples` schedules (seeded), run each into `folder` (a RunFolder), shrink the first failure."""
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample

    start = time.monotonic()
    rows: list[ResultRow] = []
    done: dict[Schedule, ResultRow] = {}
    target: list[frozenset[str]] = []  # the failing checkers of the first failure
    first_fail: list[float] = []

    def fails(s: Schedule) -> bool:
        if s not in done:
            if first_fail and time.monotonic() - first_fail[0] > shrink_budget:
                return False  # the budget is spent: no new case, the smallest failure so far stands
            n = len(rows) + 1
            case_dir = os.path.join(folder.path, "cases", f"{n:03d}-{s.spec().replace('@', '-').replace(',', '-')}")
            say(f"example {n}: {s.spec()} (restarts {s.restarts}) ...")
            row = run_case(dataclasses.replace(options, max_restarts=s.restarts), ref, s.spec(), case_dir)
            say(f"example {n}: {row.verdict}: {row.detail[:200]}")
            folder.append(row)
            rows.append(row)
            done[s] = row
        row = done[s]
        if row.verdict not in (FAIL, UNKNOWN):
            return False
        how = frozenset(v.checker for v in row.checkers if v.status in (FAIL, UNKNOWN))
        if not target:
            target.append(how)
            first_fail.append(time.monotonic())
            say(f"failure found ({', '.join(sorted(how))}); shrinking")
        return how == target[0]

    config = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    try:
        minimal = find(schedules(ref), fails, settings=config, random=random.Random(seed))
    except NoSuchExample:
        minimal = None
    failing = [r for r in rows if r.verdict in (FAIL, UNKNOWN)]
    gaps: dict[str, int] = {}
    for r in rows:
        if r.verdict not in (FAIL, UNKNOWN) and str(r.verdict) not in ("PASS", "WARN", "REFUSED-AS-EXPECTED"):
            gaps[str(r.verdict)] = gaps.get(str(r.verdict), 0) + 1
    return FuzzOutcome(
        rows,
        done.get(minimal) if minimal is not None else None,
        minimal,
        len(failing),
        gaps,
        time.monotonic() - start,
    )


__all__ = ["FUZZED", "FuzzOutcome", "Schedule", "fuzz_cases", "schedules"]
