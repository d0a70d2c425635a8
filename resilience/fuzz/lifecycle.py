"""The checkpoint lifecycle as a small abstract model: actions in, scenario steps out.

Generated actions carry raw choices (a rank index, a phase, a seed) that do not depend on anything
else, so a list of them shrinks well: any element can be deleted or simplified. The model interprets
each action against what it knows (is the job alive, which checkpoints surely exist, which are surely
intact, which topology runs) and emits the scenario steps it stands for, or nothing when the action
makes no sense at that point (a save in a job that crashed). It keeps generated scenarios inside what the
runner can carry out and the checkers can judge:

- faults armed on a save always arm right before it (`crash`, then `save`), on a rank that takes part;
- corruption at rest only when a committed checkpoint surely exists, aimed at a rank that wrote files;
- a resume on another topology only when an intact checkpoint surely exists;
- a resume in another precision (one of `precisions`, when given) only once saving is over: no save
  follows it, since what a later load must give is known only for saves in the model's precision;
- saves only on topologies with the scenario's tp and pp (the checkers judge every load against the
  scenario's topology, so a checkpoint written elsewhere would be judged against the wrong one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..state import Topology
from ..vocab.combos import CheckpointType, Combination

# ---- raw actions ------------------------------------------------------------------------------------
COORDINATOR_PHASES = ("manifest", "commit_rename", "tracker_update")
CRASH_PHASES = ("staging", "write") + COORDINATOR_PHASES + ("async_finalize",)
CRASH_OPS = ("create", "fsync", "mkdir", "rename")
ERRNOS = ("ENOSPC", "EIO", "EDQUOT", "EROFS")
IO_ERROR_OPS = ("create", "write", "fsync", "mkdir", "rename")
CORRUPTIONS = {  # at-rest kind -> the `corrupt:` shorthand the scenario uses
    "truncate": "truncate",
    "bit_flip": "bitflip",
    "delete_file": "delete",
    "metadata_damage": "metadata",
    "tracker_damage": "tracker",
    "leftover_staging": "staging",
    "extra_file": "extra",
    "escaping_path": "escape",
    "hostile_pickle": "pickle",
}
METADATA_HOW = ("garble", "truncate", "empty", "delete")
# a resumed job's start-up in step, or across a wall-clock second (drawn 1 in 8: it costs a second)
STAGGERS = (0.0, 1.1)
TRACKER_HOW = ("stale", "empty", "non_numeric", "future", "delete", "release")
WRITE_FAULTS = ("io_error", "torn_write", "short_write", "slow_write")
SECONDS, LONG_DELAY = "seconds", 1.0  # FaultDuringSave.detail of a slow_write that stalls for a second
# the file a write fault strikes, by role, aimed through the layout learned for the backend under test (a
# backend without such a file makes the case N/A, with the reason); data: the rank's nth write of the save
FAULT_FILES = {"data": None, "manifest": "@metadata", "tracker": "@pointer"}


@dataclass(frozen=True)
class Train:
    steps: int = 1


@dataclass(frozen=True)
class Save:
    pass


@dataclass(frozen=True)
class Finalize:
    pass


@dataclass(frozen=True)
class Resume:
    where: int | None = None  # None: the scenario's topology; i: the i-th other topology
    cont: int = 1  # steps trained after the load, compared with training that never stopped
    precision: int | None = None  # None: the model's; i: the i-th of the lifecycle's other precisions
    stagger: float = 0.0  # seconds the job's ranks but rank 0 start late (STAGGERS)


@dataclass(frozen=True)
class CrashDuringSave:
    rank: int = 0  # an index, mapped onto the ranks that reach the crash point
    point: tuple = ("phase", "write")  # ("phase", name) | ("byte", n) | ("op", op, when)


@dataclass(frozen=True)
class FaultDuringSave:
    kind: str = "io_error"  # one of WRITE_FAULTS
    rank: int = 0
    nth: int = 1
    detail: str = "write"  # io_error: the op; torn_write: fill; slow_write: SECONDS for a long delay
    errno: str = "EIO"
    file: str = "data"  # one of FAULT_FILES: a rank's data, the coordinator's manifest or tracker


@dataclass(frozen=True)
class Corrupt:
    kind: str = "truncate"  # a key of CORRUPTIONS
    rank: int = 0  # an index, mapped onto the ranks that wrote files
    seed: int = 0
    how: str = ""  # metadata_damage / tracker_damage: how
    dcp_metadata: bool = False  # metadata_damage on DCP's .metadata instead of our manifest.json


@dataclass(frozen=True)
class DeleteOld:
    which: int = 0  # which older checkpoint (index among the surely committed ones)
    seed: int = 0


@dataclass(frozen=True)
class PowerLoss:
    rank: int = 0
    phase: str | None = None  # None: power is lost at the job's end
    max_states: int = 2


Action = Train | Save | Finalize | Resume | CrashDuringSave | FaultDuringSave | Corrupt | DeleteOld | PowerLoss


# ---- the model --------------------------------------------------------------------------------------
@dataclass
class Lifecycle:
    """What the model knows while it turns actions into steps. `steps` are YAML-ready step mappings."""

    combo: Combination
    base: Topology
    others: list[Topology] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    topo: Topology = None  # type: ignore[assignment]  # __post_init__: base unless given
    alive: bool | None = True  # None: the job may have died (its load may have failed)
    iteration: int | None = 0  # None: not known (a resume whose pick depends on faults)
    pending: bool = False  # an async save staged, not yet finalized
    pending_it: int | None = None
    folders: dict[int, Topology] = field(default_factory=dict)  # surely committed checkpoints
    intact: set[int] = field(default_factory=set)  # ... and surely undamaged
    maybe: bool = False  # a checkpoint whose commit is uncertain may exist
    rest_in_job: bool = False  # damage at rest happened since the job started
    power_loss_in_job: bool = False
    deleted_since_save: bool = False  # a shard was deleted at rest: that rank may have no file left to damage
    tracker_gone: bool = False  # the tracker was deleted at rest (until a save writes it again)
    manifest_damaged: bool = False  # the newest manifest was damaged: a rank's files can no longer be told apart
    saves: int = 0
    clean_saves: int = 0
    loads: int = 0
    precisions: list[str] = field(default_factory=list)  # what a resume may change to (not the model's)
    precision_changed: bool = False  # a resume changed precision: no save may follow

    def __post_init__(self):
        self.topo = self.topo or self.base

    # ---- what the model knows ------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        return self.combo.type is CheckpointType.LOCAL

    @property
    def any_checkpoint(self) -> bool:
        """A committed checkpoint surely exists once this job ends."""
        return bool(self.folders) or (self.alive is True and self.pending and self.pending_it is not None)

    def can_save_here(self) -> bool:
        return (self.topo.tp, self.topo.pp) == (self.base.tp, self.base.pp) and not self.precision_changed

    def writer_rank(self, index: int) -> int:
        """A rank that writes files in every layout: pipeline stage 0, data-parallel rank 0 (ranks 0..tp-1
        on any topology with the scenario's tp and pp); in LOCAL every rank writes its own folder.
        Checkpoints are only written on the scenario's topology or one that differs in dp."""
        if self.is_local:
            return index % self.base.world  # LOCAL only ever saves on the scenario's topology
        return index % self.base.tp

    def allows(self, action) -> bool:
        """Whether the action would emit any step now (the state machine's preconditions); cheap,
        as it is asked for every rule at every step."""
        if isinstance(action, Resume):
            return True
        if isinstance(action, Train):
            return self.alive is not False
        if isinstance(action, Save):
            return self.alive is not False and self.can_save_here()
        if isinstance(action, Finalize):
            return self.combo.is_async and self.pending and self.alive is True and not self.rest_in_job
        if isinstance(action, Corrupt):
            data = action.kind in ("truncate", "bit_flip", "delete_file")
            return self.any_checkpoint and not (data and self.deleted_since_save)
        if isinstance(action, DeleteOld):
            return len(self.folders) + (self.pending and self.alive is True and self.pending_it is not None) >= 2
        if self.power_loss_in_job and (
            isinstance(action, (CrashDuringSave, PowerLoss)) or getattr(action, "kind", "") == "io_error"
        ):
            return False
        return self._fault_ready(dry_run=True)

    # ---- actions -------------------------------------------------------------------------------
    def apply(self, action) -> list[dict]:
        """Interpret one action; the steps it emitted (also appended to `steps`)."""
        before = len(self.steps)
        handler = getattr(self, "_" + type(action).__name__.lower())
        handler(action)
        return self.steps[before:]

    def _emit(self, *steps: dict) -> None:
        self.steps.extend(steps)

    def _ready_for_work(self) -> bool:
        """Before training or saving: a job damaged at rest goes on as a new job that first resumes."""
        if self.alive is False:
            return False
        if self.rest_in_job:
            self._resume(Resume(None if self.topo == self.base else self._index_of(self.topo), 0))
        return self.alive is not False

    def _index_of(self, topo: Topology) -> int | None:
        return self.others.index(topo) if topo in self.others else None

    def _train(self, a: Train) -> None:
        if not self._ready_for_work():
            return
        self._emit({"train": a.steps})
        if self.iteration is not None:
            self.iteration += a.steps

    def _commit_pending(self) -> None:
        if self.pending:
            if self.alive is True and self.pending_it is not None:
                self.folders[self.pending_it] = self.topo
                self.intact.add(self.pending_it)
                self.clean_saves += 1
            else:
                self.maybe = True
        self.pending, self.pending_it = False, None

    def _saved(self, *, intact: bool = True) -> None:
        """Bookkeeping of a save that returned normally."""
        self.saves += 1
        self.deleted_since_save = self.tracker_gone = self.manifest_damaged = False
        if self.combo.is_async:
            self._commit_pending()
            self.pending, self.pending_it = True, self.iteration
            if not intact:
                self.pending_it = None  # committed, but damaged: never counted as intact
                self.maybe = True
            return
        if self.alive is True and self.iteration is not None:
            self.folders[self.iteration] = self.topo
            self.clean_saves += 1
            if intact:
                self.intact.add(self.iteration)
            else:
                self.intact.discard(self.iteration)
        else:
            self.maybe = True

    def _save(self, a: Save) -> None:
        if not self.can_save_here() or not self._ready_for_work():
            return
        self._emit({"save": None})
        self._saved()

    def _finalize(self, a: Finalize) -> None:
        if not self.combo.is_async or not self.pending or self.alive is not True or self.rest_in_job:
            return
        self._emit({"finalize": None})
        self._commit_pending()

    def _died_saving(self) -> None:
        """A save cut short: its checkpoint and any in flight may or may not be committed."""
        self.saves += 1
        if self.pending:
            self.maybe = True
        self.pending, self.pending_it = False, None
        self.maybe = True
        self.alive = False

    def _fault_ready(self, dry_run: bool = False) -> bool:
        """A fault is only armed where the save after it surely runs (else it never fires)."""
        if not self.can_save_here() or self.alive is not True:
            return False
        if self.rest_in_job:  # a new job resumes first: would it surely load?
            import copy

            probe = copy.deepcopy(self)
            probe._ready_for_work()
            if probe.alive is not True or not probe.can_save_here():
                return False
        return dry_run or (self._ready_for_work() and self.alive is True)

    def _crashduringsave(self, a: CrashDuringSave) -> None:
        if self.power_loss_in_job or not self._fault_ready():  # a crash would pre-empt the power loss
            return
        kind = a.point[0]
        if kind == "phase":
            phase = a.point[1]
            if phase == "async_finalize" and not self.combo.is_async:
                phase = "write"
            rank = 0 if phase in COORDINATOR_PHASES and not self.is_local else self.writer_rank(a.rank)
            args = {"rank": rank, "phase": phase}
        elif kind == "byte":
            args = {"rank": self.writer_rank(a.rank), "after_bytes": int(a.point[1])}
        else:
            op, when = a.point[1], a.point[2]
            rank = 0 if op == "rename" and not self.is_local else self.writer_rank(a.rank)
            args = {"rank": rank, "op": op, "when": when}
        self._emit({"crash": args}, {"save": None})
        self._died_saving()

    def _faultduringsave(self, a: FaultDuringSave) -> None:
        if (a.kind == "io_error" and self.power_loss_in_job) or not self._fault_ready():
            return
        rank = self.writer_rank(a.rank)
        path = FAULT_FILES.get(a.file)
        nth = a.nth
        if path is not None:  # the manifest and the tracker: written once, by the coordinator (each rank in LOCAL)
            nth = 1
            rank = rank if self.is_local else 0
        if a.kind == "io_error":
            op = a.detail if a.detail in IO_ERROR_OPS else "write"
            if path is not None and op in ("mkdir", "rename"):
                op = "write"
            if op == "rename" and not self.is_local:
                rank = 0
            nth = nth if op == "write" else 1  # a save makes one folder, one rename, one file per rank
            record = {"kind": "io_error", "rank": rank, "op": op, "nth": nth, "errno": a.errno}
        elif a.kind == "torn_write":
            record = {
                "kind": "torn_write",
                "rank": rank,
                "nth": nth,
                "fill": a.detail if a.detail in ("zeros", "garbage") else "zeros",
            }
        elif a.kind == "short_write":
            record = {"kind": "short_write", "rank": rank, "nth": nth}
        else:
            # storage slow for seconds, not milliseconds: an async finalize that waits with a timeout sees it
            delay = LONG_DELAY if a.detail == SECONDS else 0.02
            record = {"kind": "slow_write", "rank": rank, "delay": delay, "times": nth}
        if path is not None:
            record["path"] = path
        self._emit({"fault": record}, {"save": None})
        if a.kind == "io_error":
            if self.combo.is_async:  # the background write's failure surfaces at finalize: finalize now
                self._emit({"finalize": None})
            self._died_saving()
        else:
            self._saved(intact=a.kind != "torn_write")

    def _powerloss(self, a: PowerLoss) -> None:
        if self.power_loss_in_job or not self._fault_ready():
            return
        args: dict = {"max_states": a.max_states}
        if a.phase is not None:
            phase = a.phase if a.phase != "async_finalize" or self.combo.is_async else "write"
            rank = 0 if phase in COORDINATOR_PHASES and not self.is_local else self.writer_rank(a.rank)
            args = {"rank": rank, "phase": phase, **args}
        self._emit({"lose_unsynced": args}, {"save": None})
        self.power_loss_in_job = True
        if a.phase is not None:
            self._died_saving()
        else:
            self._saved()

    def _newest_known(self) -> int | None:
        """The iteration of the newest checkpoint on disk once this job ends, if known."""
        if self.maybe:
            return None
        its = set(self.folders)
        if self.pending and self.alive is True:
            if self.pending_it is None:
                return None
            its.add(self.pending_it)
        return max(its) if its else None

    def closing_steps(self) -> list[dict]:
        """Steps that end the scenario well: the runner ends every scenario with a load on the last job's
        topology, which after damage at rest on another topology, with nothing surely intact, would be a
        failed load judged as a wrong answer to a topology change; load on the scenario's topology instead."""
        if self.rest_in_job and self.topo != self.base and not self.intact:
            return [{"resume": {"continue": 0}}]
        return []

    def _job_ends(self) -> None:
        """Damage at rest happens once the job ended, and the training loop finalizes an async save
        before it exits: what was in flight is committed first."""
        if self.alive is True:
            self._commit_pending()

    def _corrupt(self, a: Corrupt) -> None:
        if not self.any_checkpoint:
            return
        data = a.kind in ("truncate", "bit_flip", "delete_file")
        if data and self.deleted_since_save:
            return
        self._job_ends()
        args: dict = {"kind": CORRUPTIONS[a.kind], "rank": self.writer_rank(a.rank)}
        if data and self.manifest_damaged and not self.is_local:
            del args["rank"]  # which files a rank wrote is read from the manifest: any file then
        if a.kind == "metadata_damage":
            args["how"] = a.how if a.how in METADATA_HOW else "garble"
            if a.dcp_metadata and self.combo.format.value != "torch":
                args["name"] = ".metadata"
        elif a.kind == "tracker_damage":
            args["how"] = a.how if a.how in TRACKER_HOW else "stale"
            if args["how"] == "delete" and (self.tracker_gone or self.is_local):
                args["how"] = "stale"  # nothing to delete (LOCAL keeps one tracker per rank: it may be missing)
            self.tracker_gone = self.tracker_gone or args["how"] == "delete"
        if (
            a.kind in ("tracker_damage", "leftover_staging", "escaping_path", "metadata_damage")
            and "rank" in args
            and not self.is_local
        ):
            del args["rank"]  # these pick the checkpoint, not a rank's files
        args["seed"] = a.seed
        self._emit({"corrupt": args})
        self.rest_in_job = True
        self.deleted_since_save = self.deleted_since_save or a.kind == "delete_file"
        self.manifest_damaged = self.manifest_damaged or (a.kind == "metadata_damage" and "name" not in args)
        if a.kind not in ("tracker_damage", "leftover_staging"):
            newest = self._newest_known()
            if newest is not None:
                self.intact.discard(newest)
            elif self.intact:
                self.intact.discard(max(self.intact))

    def _deleteold(self, a: DeleteOld) -> None:
        if len(self.folders) + (self.pending and self.alive is True and self.pending_it is not None) < 2:
            return
        self._job_ends()
        older = sorted(self.folders)[:-1]
        if not older:
            return
        k = older[a.which % len(older)]
        steps = [{"corrupt": {"kind": "delete", "iteration": k, "seed": a.seed}}]
        if k in self.intact:
            steps.append({"corrupt": {"kind": "metadata", "how": "delete", "iteration": k, "seed": a.seed}})
        self._emit(*steps)
        self.rest_in_job = True
        del self.folders[k]
        self.intact.discard(k)

    def _resume(self, a: Resume) -> None:
        target = self.base if a.where is None or not self.others else self.others[a.where % len(self.others)]
        if target != self.base and not self.intact:
            target = self.base  # a load elsewhere with no intact checkpoint is judged a wrong answer
        # the job ends: an async save in flight is finalized by the training loop
        if self.alive is not False:
            self._commit_pending()
        args: dict = {}
        if target != self.base:
            args["topology"] = str(target)
        args["continue"] = a.cont
        if a.stagger:
            args["stagger"] = a.stagger
        if a.precision is not None and self.precisions and self.saves:
            args["precision"] = self.precisions[a.precision % len(self.precisions)]
            self.precision_changed = True
        self._emit({"resume": args})
        self.loads += 1
        self.topo = target
        self.rest_in_job = self.power_loss_in_job = False
        self.pending, self.pending_it = False, None
        refused = target != self.base and (
            self.is_local or (self.combo.type is CheckpointType.LEGACY and _cut(target) != _cut(self.base))
        )
        if refused or not (self.folders or self.maybe):
            self.alive, self.iteration = False, None
            return
        newest = self._newest_known()
        if self.intact and newest is not None and newest in self.intact:
            self.alive, self.iteration = True, newest + a.cont
        elif self.intact:
            self.alive, self.iteration = True, None
        else:
            self.alive, self.iteration = None, None


def _cut(topo: Topology) -> tuple[int, int, int]:  # what LEGACY files are cut by: a change of any is refused
    return topo.tp, topo.pp, topo.vpp


def interpret(
    combo: Combination,
    base: Topology,
    others: list[Topology],
    actions: list,
    precisions: list[str] | None = None,
    start: int = 0,
) -> Lifecycle:
    """Run the model over `actions`; a scenario where no save completes gets one first (there is nothing
    to judge without a checkpoint). `precisions`: what a resume may change the precision to; `start`: the
    model's start_iteration."""
    life = Lifecycle(combo, base, list(others), precisions=list(precisions or []), iteration=start)
    for a in actions:
        life.apply(a)
    if life.alive is True:
        life._commit_pending()  # the training loop finalizes an async save before it exits
    if not life.clean_saves:
        life = Lifecycle(combo, base, list(others), precisions=list(precisions or []), iteration=start)
        for a in [Train(1), Save()] + list(actions):
            life.apply(a)
    life.steps += life.closing_steps()
    return life
