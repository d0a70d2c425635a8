"""What a checker reads: the evidence of one case (its saves, its loads and what they returned, the
acknowledgements, the damage and crashes), built from the case's history by resilience.runner.evidence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..state import Topology
from ..vocab.combos import Combination
from ..vocab.contract import TopologyContract


@dataclass
class SaveRecord:
    job: int
    iteration: int
    topology: str
    fingerprint: str | None
    rng: str | None
    status: str  # ok: returned on every rank / fail: raised on every rank that returned / info: indeterminate
    index: int  # order in the history: where it became acknowledged, else where it was invoked
    save_id: str = ""  # unique in the case: two saves of one iteration are two records
    world: int = 0  # ranks that took part; every one must return for an acknowledgement
    ok_ranks: list[int] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)  # rank -> what the save (or its finalize) raised
    invoked_at: dict[int, float] = field(default_factory=dict)  # rank -> time it invoked the save
    returned_at: dict[int, float] = field(default_factory=dict)  # rank -> time it returned ok
    generation: int | None = None  # the number this save stamped into the state (unique in the case)
    dtype: str | None = None  # the precision it saved in ('bf16', 'fp32+optim_bf16'; None: not recorded)
    recovery: bool = False  # made by a recovery, after a fault the job survived

    @property
    def acknowledged(self) -> bool:
        return self.status == "ok"


@dataclass
class LoadRecord:
    job: int
    topology: str
    status: str  # ok / fail
    index: int
    iteration: int | None = None
    fingerprint: str | None = None
    rng: str | None = None
    rng_restored: bool = False
    warnings: list[str] = field(default_factory=list)
    error: str = ""
    refused: bool = False
    path: str = ""
    crash_state: str | None = None  # set when loaded from a materialised power-loss state
    continued: list[tuple[int, str]] = field(default_factory=list)  # (iteration, fingerprint) after training on
    generations: dict | None = None  # {"found": [generation, ...], "pieces": {generation: [key, ...]}} if mixed
    dtype: str | None = None  # the precision of the state it loaded into (state.precision; None: not recorded)
    captured: list[str] = field(default_factory=list)  # Python warnings and log records heard during the load
    # part of a recovery: "fault" (the newest checkpoint after the fault), "save" (the recovery's own save)
    recovery: str = ""
    raw: dict | None = None  # a failed load: what the library raised under the adapter's error {"error", "class", ...}
    not_exception: list[str] = field(default_factory=list)  # a failed load's class and bases, if not an Exception
    rank_errors: dict[int, str] = field(default_factory=dict)  # a failed load: each rank's error (and raw's)


@dataclass(frozen=True)
class FileOp:
    """One operation on the checkpoint folder that can destroy or move a file, as a rank's I/O log or the
    file system's log recorded it."""

    op: str  # create (opened for writing: truncates a file there), rename, exchange, unlink, rmtree
    path: str  # relative to the checkpoint root
    rank: int | None  # None: outside every rank
    pid: int
    thread: str  # "main", "writer" (a thread of the rank) or the file system's name for it
    time: float  # seconds since the epoch, the history's clock
    job: int
    dst: str = ""  # rename, exchange: the other path, relative to the root
    thread_name: str = ""  # the name the thread ran under (a writer thread's: "pruner", "Thread-3"), when logged

    @property
    def named_thread(self) -> str:
        """The thread's name where it tells more than "main" (a writer's: "pruner"), else ""."""
        return self.thread_name if self.thread != "main" else ""

    def __str__(self) -> str:
        where = f"{self.path} -> {self.dst}" if self.dst else self.path
        who = "outside every rank" if self.rank is None else f"rank {self.rank}"
        named = f" {self.named_thread!r}" if self.named_thread else ""
        return f"{self.op} {where} by {who} (pid {self.pid}, {self.thread} thread{named}) in job {self.job}"


@dataclass
class Evidence:
    """Everything checkers look at for one scenario x combination."""

    combo: Combination
    save_topology: Topology
    saves: list[SaveRecord]
    loads: list[LoadRecord]
    corruptions: list[dict]  # {"index", "iteration", "detail", ...}
    crashes: list[dict]  # {"job", "index", "ranks", "how"}
    lost_unsynced: list[dict]  # {"index", "states"}
    never_stopped: Callable[[int], str]  # fingerprint of training that never stopped, at an iteration
    faults_configured: list[dict] = field(default_factory=list)
    faults_fired: list[dict] = field(default_factory=list)
    expect: dict = field(default_factory=dict)
    # every save or finalize that raised: {"op", "save_id", "job", "rank", "iteration", "error", "errno", "index"}
    errors: list[dict] = field(default_factory=list)
    # ranks still running a while after another rank raised: {"job", "rank", "error", "stacks", "after"}
    blocked: list[dict] = field(default_factory=list)
    # what the backend promises across topologies (None: the preset of `combo`)
    contract: TopologyContract | None = None
    # (iteration, saved precision, loaded precision) -> what a load changing the precision must give
    converted: Callable[[int, str, str], PrecisionTargets] | None = None
    # each job with a recover op: {"job", "index", "started", "survived": [errors before it], "ended": {...}}
    recoveries: list[dict] = field(default_factory=list)
    # loads that returned on some ranks and raised on others: {"job", "ok": [rank, ...], "errors": {rank: error}}
    load_splits: list[dict] = field(default_factory=list)
    # ranks still running when their job's timeout ended it: {"job", "rank", "ops": [{"op", "iteration"}],
    # "seconds", "stacks"}
    hangs: list[dict] = field(default_factory=list)
    # the creates, renames and deletions in the checkpoint folder, in time order (None: no log was kept)
    file_ops: list[FileOp] | None = None

    def saved(self, iteration: int | None) -> list[SaveRecord]:
        return [s for s in self.saves if s.iteration == iteration]

    def acknowledged_before(self, index: int) -> list[SaveRecord]:
        return [s for s in self.saves if s.status == "ok" and s.index < index]

    def corrupted_before(self, index: int) -> list[dict]:
        return [c for c in self.corruptions if c["index"] < index]

    def precision_change(self, ld: LoadRecord) -> tuple[str, str] | None:
        """(saved precision, loaded precision) when a load put a checkpoint into a state of another precision,
        else None. An ok load is compared with the saves of its iteration, a failed one with the saves
        acknowledged before it (it may have been refused by any of them)."""
        saves = self.saved(ld.iteration) if ld.status == "ok" else self.acknowledged_before(ld.index)
        saved = {s.dtype for s in saves if s.dtype}
        if ld.dtype is None or len(saved) != 1 or ld.dtype in saved:
            return None
        return saved.pop(), ld.dtype

    def same_precision(self, loads: list[LoadRecord]) -> list[LoadRecord]:
        """The loads whose values compare with what a save wrote (the precision checker judges the rest)."""
        return [ld for ld in loads if self.precision_change(ld) is None]


@dataclass(frozen=True)
class PrecisionTargets:
    """What a load changing the precision may give, as fingerprints (runner/oracle.py)."""

    exact: str  # converted losing no more than it must (fp32 values kept as parameters or main parameters)
    cast: str  # the values cast to the new dtype, the fp32 copy rebuilt from (or replaced by) the cast
    lost: str  # what the cast loses, e.g. "3200 of 3232 fp32 parameters changed, relative error up to ..."
    after: Callable[[str, int], str]  # ("exact" or "cast", iteration) -> fingerprint after training on to it
    # what even the exact conversion loses ("": nothing): fp32 optimizer moments rounded into bf16 ones, which
    # no conversion keeps, so the load must say so as a cast must
    unavoidable: str = ""
